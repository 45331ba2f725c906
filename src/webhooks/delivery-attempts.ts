/**
 * Batched recording of webhook attempts, apart from the worker so it can be tested
 * without threads or a database.
 */
import type { AttemptRecord } from '../db/webhooks.js'

/** A batch of attempts waits for this many while requests are still in flight... */
export const RECORD_BATCH = 32
/** ...but no longer than this (ms). */
export const RECORD_WAIT_MS = 10

interface QueuedAttempt { a: AttemptRecord; resolve: () => void; reject: (e: unknown) => void }

export interface AttemptWriterOptions {
  /** Writes a batch in one statement (recordAttempts). */
  batch: (list: AttemptRecord[]) => Promise<void>
  /** Writes one attempt in its own transaction (recordAttempt). */
  one: (a: AttemptRecord) => Promise<void>
  /** More attempts are coming (requests in flight). */
  busy: () => boolean
  /** The error means the database is unreachable (isDbUnavailable), not a bad row. */
  unavailable: (err: unknown) => boolean
  /** A batch the database could not take is retried for this long after its oldest attempt. */
  retryForMs: number
}

/**
 * Each batch is ONE statement however many attempts it holds. A statement costs PostgreSQL
 * ~0.5 ms whatever its size (docs/decisions.md "Attempt batches"), so while requests are
 * still in flight a batch waits for RECORD_BATCH attempts or RECORD_WAIT_MS; with nothing in
 * flight it is written at once, so an idle pool adds no delay. A batch refused because the
 * database is unreachable is written again (100 ms doubling to 2 s) while its oldest attempt
 * is younger than `retryForMs`: dropping it would let the claim's lease lapse and the receiver
 * get the delivery a second time. A batch failing for another reason is retried row by row,
 * each in its own transaction, so one bad row never fails or loses another. Callers resolve
 * after the write.
 */
export class AttemptWriter {
  private queue: QueuedAttempt[] = []
  private running: Promise<void> | null = null
  private filled: (() => void) | null = null
  stats = { statements: 0, attempts: 0, retries: 0 }

  constructor (private readonly o: AttemptWriterOptions) {}

  record (a: AttemptRecord): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ a, resolve, reject })
      if (this.queue.length >= RECORD_BATCH || !this.o.busy()) this.filled?.()
      this.running ??= this.drain()
    })
  }

  async idle (): Promise<void> {
    this.filled?.()
    while (this.running !== null) await this.running
  }

  /** Resolves once RECORD_BATCH attempts are queued, nothing is in flight, or RECORD_WAIT_MS passed. */
  private gather (): Promise<void> {
    if (this.queue.length >= RECORD_BATCH || !this.o.busy()) return Promise.resolve()
    return new Promise<void>(resolve => {
      const timer = setTimeout(() => this.filled?.(), RECORD_WAIT_MS)
      this.filled = () => { clearTimeout(timer); this.filled = null; resolve() }
    })
  }

  private async drain (): Promise<void> {
    // Let this turn's attempts join the first batch.
    await new Promise<void>(resolve => setImmediate(resolve))
    while (this.queue.length > 0) {
      await this.gather()
      const batch = this.queue
      this.queue = []
      await this.write(batch)
    }
    this.running = null
  }

  private async write (batch: QueuedAttempt[]): Promise<void> {
    const oldest = Math.min(...batch.map(q => q.a.attemptedAt.getTime()))
    for (let wait = 100; ; wait = Math.min(2000, wait * 2)) {
      try {
        await this.o.batch(batch.map(q => q.a))
        this.stats.statements++
        this.stats.attempts += batch.length
        for (const q of batch) q.resolve()
        return
      } catch (err) {
        if (!this.o.unavailable(err) || Date.now() + wait - oldest > this.o.retryForMs) {
          if (batch.length === 1) { batch[0].reject(err); return }
          break
        }
        this.stats.retries++
        await new Promise(resolve => setTimeout(resolve, wait))
      }
    }
    for (const q of batch) {
      try { await this.o.one(q.a); q.resolve() } catch (e) { q.reject(e) }
    }
  }
}
