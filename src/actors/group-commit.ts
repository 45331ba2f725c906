import { isDbUnavailable, type Sql, type Tx } from '../db/connect.js'
import { observeCommit } from '../worker-stats.js'
/** A unit of durable work: the SQL of one mutation, run inside a shared transaction. */
export type Work<T> = (tx: Tx) => Promise<T>

interface Item { work: Work<unknown>; resolve: (v: unknown) => void; reject: (e: unknown) => void }

/**
 * Group commit (DESIGN.md section 3): while one transaction is in flight, new mutations queue;
 * when it finishes, everything queued goes to PostgreSQL as the next single transaction, its
 * statements pipelined. Batches grow with load and add no delay when idle (no timer window).
 * Callers are released only after COMMIT. If a batch fails, each of its items is retried in
 * a transaction of its own, so one bad mutation never fails or loses another.
 */
export class GroupCommit {
  private queue: Item[] = []
  private inFlight: Promise<void> | null = null
  /** Number of transactions committed, and of items in them (tests, metrics). */
  stats = { transactions: 0, items: 0, fallbacks: 0 }

  /**
   * `txTimeoutMs`: a transaction not settled by then fails its batch as "database unavailable"
   * (issue 15: one transaction lost in the driver during an outage must not wedge every later
   * commit of the shard behind it). Its outcome is then unknown; callers treat it so.
   */
  constructor (private readonly sql: Sql, private readonly txTimeoutMs = 10_000) {}

  run<T> (work: Work<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ work, resolve: resolve as (v: unknown) => void, reject })
      if (this.inFlight === null) this.inFlight = this.drain()
    })
  }

  /** Resolves once everything queued so far is committed (or failed). */
  async idle (): Promise<void> {
    while (this.inFlight !== null) await this.inFlight
  }

  private async drain (): Promise<void> {
    // Let the current turn's mutations join the first batch.
    await new Promise<void>(resolve => setImmediate(resolve))
    while (this.queue.length > 0) {
      const batch = this.queue
      this.queue = []
      await this.commit(batch)
    }
    this.inFlight = null
  }

  private bounded<T> (p: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined
    return Promise.race([
      p,
      new Promise<never>((_resolve, reject) => {
        timer = setTimeout(() => reject(Object.assign(new Error(`transaction not settled within ${this.txTimeoutMs} ms`), { code: 'DB_STALLED' })), this.txTimeoutMs)
      }),
    ]).finally(() => clearTimeout(timer))
  }

  private async commit (batch: Item[]): Promise<void> {
    const started = performance.now()
    let results: unknown[]
    try {
      results = await this.bounded(this.sql.begin(async (tx) => {
        // Every item settles before COMMIT or ROLLBACK. With Promise.all the first failure would
        // roll back while siblings are still mid-work; their later statements would then run on
        // the released connection outside any transaction (autocommitted), and the per-item
        // retry below would apply them a second time.
        const settled = await Promise.allSettled(batch.map(i => i.work(tx)))
        const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected')
        if (failed) throw failed.reason
        return settled.map(r => (r as PromiseFulfilledResult<unknown>).value)
      })) as unknown[]
    } catch (err) {
      // The database is away (issue 15): retrying item by item would only wait again per item.
      if (batch.length === 1 || isDbUnavailable(err)) { for (const i of batch) i.reject(err); return }
      this.stats.fallbacks++
      for (const item of batch) {
        try {
          const v = await this.bounded(this.sql.begin(tx => item.work(tx)))
          this.stats.transactions++
          this.stats.items++
          item.resolve(v)
        } catch (e) { item.reject(e) }
      }
      return
    }
    this.stats.transactions++
    this.stats.items += batch.length
    observeCommit(batch.length, (performance.now() - started) / 1000) // metrics (src/worker-stats.ts)
    for (let i = 0; i < batch.length; i++) batch[i].resolve(results[i])
  }
}
