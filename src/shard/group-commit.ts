import { isDbUnavailable, within, type Sql, type Tx } from '../db/connect.js'
import { updateJobProgress, type NewJob, type Transition } from '../db/jobs.js'
import { completeJob, createJob, writeBatch, type Completion, type History, type VideoMedia } from '../db/ledger.js'
import type { JobRow } from '../jobs/view.js'
import type { RouteRecord } from '../db/upstream.js'
import { observeCommit } from '../worker-stats.js'

/** What the batch statement (writeBatch) can write of an item, tagged on its work by create, complete and transition. */
interface Tags { creation?: NewJob & JobRow; record?: RouteRecord | null; completion?: Completion; transition?: Transition }

const tags = (i: Item): Tags => i.work as Tags

/** An item the batch statement writes: a creation not born completed, a completion other than a video's, a transition. */
function batchable (i: Item): boolean {
  const w = tags(i)
  return w.creation !== undefined ? w.creation.status !== 'completed' : w.completion !== undefined || w.transition !== undefined
}

const DONE = Promise.resolve()

/** A unit of durable work: the SQL of one mutation, run inside a shared transaction. */
export type Work<T> = (tx: Tx) => Promise<T>

interface Item { work: Work<unknown>; resolve: (v: unknown) => void; reject: (e: unknown) => void }

/** Releases a committed batch's callers (GroupCommit.drain). */
type Settle = () => void

/**
 * What a creation's charge committed: the account's balance and free videos right after it,
 * and `seq`, the order in which its statement ran (GroupCommit.stamp): concurrent creations
 * resolve in an order that need not be the order their charges ran in, so the actor keeps the
 * balance of the highest `seq` it saw (AccountActor.applyBalance).
 */
export interface Charged { credits: number; free_videos_used: number; seq: number }

/**
 * Group commit (docs/architecture.md "Durability"): while one transaction is in flight, new mutations queue;
 * when it finishes, everything queued goes to PostgreSQL as the next single transaction, its
 * statements pipelined. Batches grow with load and add no delay when idle (no timer window).
 * Callers are released only after COMMIT. If a batch fails, each of its items is retried in
 * a transaction of its own, so one bad mutation never fails or loses another.
 */
export class GroupCommit {
  private queue: Item[] = []
  private inFlight: Promise<void> | null = null
  /** Number of transactions committed, and of items in them (tests, metrics). */
  stats = { transactions: 0, items: 0, fallbacks: 0, together: 0 }
  private seq = 0

  /** The last sequence number handed out by stamp(). */
  get stamped (): number { return this.seq }

  /**
   * Tags a balance a statement returned with the next sequence number. Call it right after the
   * statement's result arrives: statements of one connection answer in the order they ran, so
   * a higher number is a later balance of the same account.
   */
  stamp<T extends object> (v: T): T & { seq: number } { return Object.assign(v, { seq: ++this.seq }) }

  /**
   * `txTimeoutMs`: a transaction not settled by then fails its batch as "database unavailable"
   * (one transaction lost in the driver during an outage must not wedge every later
   * commit of the shard behind it). Its outcome is then unknown; callers treat it so.
   */
  constructor (private readonly sql: Sql, private readonly txTimeoutMs = 10_000) {}

  run<T> (work: Work<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ work, resolve: resolve as (v: unknown) => void, reject })
      if (this.inFlight === null) this.inFlight = this.drain()
    })
  }

  /**
   * A creation (src/db/ledger.ts createJob). The creations of one batch are written together:
   * one UPDATE of the accounts, one INSERT of the ledger entries, one INSERT of the jobs
   * (chargeAndInsertJobs); an account that statement could not charge has its creations run
   * one by one in the same transaction. Resolves with the balance this creation's charge left.
   */
  create (row: NewJob & JobRow, record: RouteRecord | null = null): Promise<Charged> {
    const alone = (tx: Tx) => createJob(tx, row, c => this.stamp(c), record)
    return this.run(Object.assign(alone, { creation: row, record }))
  }

  /**
   * A completion (src/db/ledger.ts completeJob); a batch's completions other than videos (with
   * their upstream history, if any) are written together (completeJobs: one statement).
   * Resolves false when the job already was terminal.
   */
  complete (c: Completion, o: { history?: History | null; media?: VideoMedia } = {}): Promise<boolean> {
    const alone = (tx: Tx) => completeJob(tx, c.row, c.resultUrl, c.at, o)
    const plain = c.row.type !== 'video' && c.row.type !== 'extend'
    return this.run(plain ? Object.assign(alone, { completion: o.history ? { ...c, history: o.history } : c }) : alone)
  }

  /**
   * A non-terminal status change without upstream history (updateJobProgress); a batch's
   * transitions are written together (updateJobsProgress: one UPDATE).
   */
  transition (t: Transition): Promise<void> {
    const alone = (tx: Tx) => updateJobProgress(tx, t.id, t.status, t.progress, null, t.at)
    return this.run(Object.assign(alone, { transition: t }))
  }

  /** Resolves once everything queued so far is committed (or failed). */
  async idle (): Promise<void> {
    while (this.inFlight !== null) await this.inFlight
  }

  private async drain (): Promise<void> {
    // Let the current turn's mutations join the first batch.
    await new Promise<void>(resolve => setImmediate(resolve))
    let settle: Settle | undefined
    while (this.queue.length > 0) {
      const batch = this.queue
      this.queue = []
      const next = this.commit(batch)
      // A committed batch's callers resume only once the next statement is on its way (its
      // arrays are built and sent before this turn's microtasks run): their replies, events
      // and adoptions overlap PostgreSQL's work on it instead of delaying it. Statements still
      // run one at a time, in order, so balance stamps keep the order the charges ran in.
      settle?.()
      settle = await next
    }
    settle?.()
    this.inFlight = null
  }

  private bounded<T> (p: Promise<T>): Promise<T> { return within(p, this.txTimeoutMs, 'transaction') }

  /** Commits a batch; returns what releases its callers (drain calls it), or nothing when they are already settled. */
  private async commit (batch: Item[]): Promise<Settle | undefined> {
    if (batch.every(batchable)) return this.commitStatement(batch)
    const started = performance.now()
    let results: unknown[]
    try {
      results = await this.bounded(this.sql.begin(async (tx) => {
        // Every item settles before COMMIT or ROLLBACK. With Promise.all the first failure would
        // roll back while siblings are still mid-work; their later statements would then run on
        // the released connection outside any transaction (autocommitted), and the per-item
        // retry below would apply them a second time.
        // The batch's creations, completions and transitions: one statement (writeBatch).
        const together: Array<Promise<unknown> | undefined> = new Array(batch.length)
        await this.together(tx, batch, together)
        const settled = await Promise.allSettled(batch.map((i, n) => together[n] ?? i.work(tx)))
        const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected')
        if (failed) throw failed.reason
        return settled.map(r => (r as PromiseFulfilledResult<unknown>).value)
      })) as unknown[]
    } catch (err) {
      // The database is away: retrying item by item would only wait again per item.
      if (batch.length === 1 || isDbUnavailable(err)) { for (const i of batch) i.reject(err); return }
      this.stats.fallbacks++
      await this.oneByOne(batch)
      return
    }
    this.stats.transactions++
    this.stats.items += batch.length
    observeCommit(batch.length, (performance.now() - started) / 1000) // metrics (src/worker-stats.ts)
    return () => { for (let i = 0; i < batch.length; i++) batch[i].resolve(results[i]) }
  }

  /** Each item in a transaction of its own (a failed batch, or creations a batch statement left). */
  private async oneByOne (items: Item[]): Promise<void> {
    for (const item of items) {
      try {
        const v = await this.bounded(this.sql.begin(tx => item.work(tx)))
        this.stats.transactions++
        this.stats.items++
        item.resolve(v)
      } catch (e) { item.reject(e) }
    }
  }

  /**
   * A batch of creations, completions and transitions only (the common case under load) is
   * ONE statement (writeBatch), so it runs as its own transaction (autocommit: COMMIT at its
   * end, as durable as an explicit one) without the BEGIN and COMMIT round trips: the shard's
   * commits run one after another, so each round trip lengthens every batch and costs both
   * processes a wake-up (docs/decisions.md "Creation CPU", "One statement per group commit").
   * Creations of an account the statement could not charge then run one by one, each in its own
   * transaction, as they would have in the batch's. A failed statement wrote nothing: every
   * item is retried alone, as a failed batch is.
   */
  private async commitStatement (batch: Item[]): Promise<Settle | undefined> {
    const started = performance.now()
    const together: Array<Promise<unknown> | undefined> = new Array(batch.length)
    try {
      await this.bounded(this.together(this.sql, batch, together))
    } catch (err) {
      if (isDbUnavailable(err)) { for (const i of batch) i.reject(err); return }
      if (batch.length === 1) { batch[0].reject(err); return }
      this.stats.fallbacks++
      await this.oneByOne(batch)
      return
    }
    this.stats.transactions++
    const left: Item[] = []
    for (let n = 0; n < batch.length; n++) if (together[n] === undefined) left.push(batch[n])
    this.stats.items += batch.length - left.length
    observeCommit(batch.length - left.length, (performance.now() - started) / 1000) // metrics (src/worker-stats.ts)
    const settle = () => { for (let n = 0; n < batch.length; n++) { const done = together[n]; if (done !== undefined) batch[n].resolve(done) } }
    if (left.length === 0) return settle
    // Creations the statement could not charge run one by one before the next batch (their
    // balance stamps must follow this statement's); the written items are answered first.
    settle()
    await this.oneByOne(left)
  }

  /**
   * The batch's creations, completions and transitions as one statement (writeBatch); fills
   * `out` for the items it wrote (a creation whose account it could not charge is left for its
   * own work). A transition its batch supersedes (a later one of the same job, or the job's
   * completion) is not sent: one statement cannot update a row twice, and the later write sets
   * everything it would have.
   */
  private async together (q: Sql | Tx, batch: Item[], out: Array<Promise<unknown> | undefined>): Promise<void> {
    const creations: Array<NewJob & JobRow> = []
    const records: Array<RouteRecord | null> = []
    const made: number[] = []
    const completions: Completion[] = []
    const finished: number[] = []
    for (let n = 0; n < batch.length; n++) {
      const w = tags(batch[n])
      if (w.creation !== undefined) {
        if (w.creation.status === 'completed') continue
        creations.push(w.creation)
        records.push(w.record ?? null)
        made.push(n)
      } else if (w.completion !== undefined) {
        completions.push(w.completion)
        finished.push(n)
      }
    }
    const transitions: Transition[] = []
    let superseded: Set<string> | null = null
    let moves = 0
    for (let n = batch.length - 1; n >= 0; n--) {
      const t = tags(batch[n]).transition
      if (t === undefined) continue
      if (superseded === null) superseded = new Set(completions.map(c => c.row.id))
      out[n] = DONE
      moves++
      if (superseded.has(t.id)) continue
      superseded.add(t.id)
      transitions.push(t)
    }
    if (creations.length === 0 && completions.length === 0 && transitions.length === 0) return
    const w = await writeBatch(q, { creations, records, completions, transitions })
    const seq = creations.length > 0 ? ++this.seq : 0
    this.stats.together += creations.length + completions.length + moves
    for (let k = 0; k < finished.length; k++) out[finished[k]] = Promise.resolve(w.completed.has(completions[k].row.id))
    // Each creation's own balance: the account's final one plus what its later jobs cost.
    const later = new Map<number, number>()
    for (let k = creations.length - 1; k >= 0; k--) {
      const r = creations[k]
      const c = w.charged.get(r.account_id)
      if (c === undefined) continue
      const after = later.get(r.account_id) ?? 0
      out[made[k]] = Promise.resolve({ credits: c.credits + after, free_videos_used: c.free_videos_used, seq })
      later.set(r.account_id, after + r.credits_charged)
    }
  }
}
