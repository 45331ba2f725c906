import { isDbUnavailable, within, type Sql, type Tx } from '../db/connect.js'
import type { NewJob, Transition } from '../db/jobs.js'
import { ChargeRefused, HooklessAccounts, isStaleHookless, writeBatch, type BatchWrite, type BatchWritten, type Completion, type History, type VideoMedia } from '../db/ledger.js'
import type { JobRow } from '../jobs/view.js'
import type { RouteRecord } from '../db/upstream.js'
import type { ClaimedDelivery } from '../db/webhooks.js'
import { observeCommit } from '../worker-stats.js'

/** A unit of durable work: the SQL of one mutation, run inside a shared transaction. */
export type Work<T> = (tx: Tx) => Promise<T>

/**
 * What a batch holds: the three writes of the batch statement (writeBatch) as data, or any
 * other mutation as its work. The kind decides how the batch is written.
 */
type Item =
  | { kind: 'create'; row: NewJob & JobRow; record: RouteRecord | null; resolve: (v: Charged) => void; reject: (e: unknown) => void }
  | { kind: 'complete'; completion: Completion; resolve: (v: boolean) => void; reject: (e: unknown) => void }
  | { kind: 'transition'; transition: Transition; resolve: (v: void) => void; reject: (e: unknown) => void }
  | { kind: 'work'; work: Work<unknown>; resolve: (v: unknown) => void; reject: (e: unknown) => void }

/** Releases a committed batch's callers (GroupCommit.drain). */
type Settle = () => void

/**
 * What a creation's charge committed: the account's balance and free videos right after it,
 * and `seq`, the order in which its statement ran (GroupCommit.stamp): concurrent creations
 * resolve in an order that need not be the order their charges ran in, so the actor keeps the
 * balance of the highest `seq` it saw (AccountActor.applyBalance).
 */
export interface Charged { credits: number; free_videos_used: number; seq: number }

/** A creation born completed (a synchronous voiceover) is inserted running, then completed in the same transaction. */
const bornCompleted = (r: JobRow): boolean => r.status === 'completed'

/**
 * The statements of a batch's creations, completions and transitions (writeBatch): `first`,
 * and `then` for the completions of creations born completed, which must follow the statement
 * that inserts them. `out[n]` is item n's answer once they ran (undefined: left for a retry of
 * its own, a creation whose account the statement could not charge).
 */
interface Plan { first: BatchWrite; born: Array<Item & { kind: 'create' }>; items: Item[]; created: number[]; completed: number[]; moved: number[] }

/**
 * Group commit (docs/architecture.md "Durability"): while one transaction is in flight, new mutations queue;
 * when it finishes, everything queued goes to PostgreSQL as the next single transaction, its
 * statements pipelined. Batches grow with load and add no delay when idle (no timer window).
 * Callers are released only after COMMIT. If a batch fails, each of its items is retried in
 * a transaction of its own, so one bad mutation never fails or loses another.
 *
 * Creations, completions and transitions are data, not work: a batch writes all of them in one
 * statement (writeBatch), and an item retried alone is the same statement with one row
 * (docs/decisions.md "One SQL form per write").
 */
export class GroupCommit {
  private queue: Item[] = []
  private inFlight: Promise<void> | null = null
  /** Number of transactions committed, and of items in them (tests, metrics); `together`: items written by a batch statement. */
  stats = { transactions: 0, items: 0, fallbacks: 0, together: 0 }
  private seq = 0
  /** Accounts whose completions need no event built (no webhook wanted one at their last completion). */
  readonly hookless = new HooklessAccounts()

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
   * `handOff`: completions insert their outbox rows claimed for this node and, once committed,
   * those rows go to `handOff` for this node's delivery worker to send (docs/architecture.md
   * "Durability", the outbox); without it they wait, unclaimed, for any node's pool.
   */
  constructor (private readonly sql: Sql, private readonly txTimeoutMs = 10_000, private readonly handOff: ((rows: ClaimedDelivery[]) => void) | null = null) {}

  /** writeBatch, collecting the outbox rows it handed into `sink` (passed on only once committed). */
  private async write (q: Sql | Tx, w: BatchWrite, sink: ClaimedDelivery[]): Promise<BatchWritten> {
    const r = await writeBatch(q, w, this.handOff !== null, this.hookless)
    for (const d of r.handed) sink.push(d)
    return r
  }

  /** Committed outbox rows to the delivery worker. */
  private handOver (sink: ClaimedDelivery[]): void {
    if (sink.length > 0) this.handOff!(sink)
  }

  /** Any other mutation: its work runs in the batch's transaction. */
  run<T> (work: Work<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => this.push({ kind: 'work', work, resolve: resolve as (v: unknown) => void, reject }))
  }

  /**
   * A creation: conditional charge (balance, and the free video when `row.free_trial`), ledger
   * entry, job row, the route's record; a job born completed also its outbox rows. The
   * creations of one batch are charged together (one UPDATE of the accounts): an account the
   * statement could not charge has its creations retried one by one, each refused with
   * ChargeRefused when the database refuses its charge. Resolves with the balance this
   * creation's charge left.
   */
  create (row: NewJob & JobRow, record: RouteRecord | null = null): Promise<Charged> {
    return new Promise<Charged>((resolve, reject) => this.push({ kind: 'create', row, record, resolve, reject }))
  }

  /**
   * A completion: terminal state, upstream history (a late success recorded when the job had
   * already failed or been cancelled), outbox rows, library row with a video's media.
   * Resolves false when the job already was terminal.
   */
  complete (c: Completion, o: { history?: History | null; media?: VideoMedia } = {}): Promise<boolean> {
    const completion: Completion = { ...c, history: o.history ?? null, media: o.media }
    return new Promise<boolean>((resolve, reject) => this.push({ kind: 'complete', completion, resolve, reject }))
  }

  /** A non-terminal status change without upstream history. */
  transition (t: Transition): Promise<void> {
    return new Promise<void>((resolve, reject) => this.push({ kind: 'transition', transition: t, resolve, reject }))
  }

  /** Resolves once everything queued so far is committed (or failed). */
  async idle (): Promise<void> {
    while (this.inFlight !== null) await this.inFlight
  }

  private push (i: Item): void {
    this.queue.push(i)
    if (this.inFlight === null) this.inFlight = this.drain()
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

  /**
   * Commits a batch; returns what releases its callers (drain calls it), or nothing when they
   * are already settled. A batch of creations, completions and transitions only (the common
   * case under load) is ONE statement, run as its own transaction (autocommit: COMMIT at its
   * end, as durable as an explicit one) without the BEGIN and COMMIT round trips: the shard's
   * commits run one after another, so each round trip lengthens every batch and costs both
   * processes a wake-up (docs/decisions.md "Creation CPU", "One statement per group commit").
   * Any other work, or a creation born completed (two statements), makes it a transaction.
   * Creations of an account the statement could not charge then run one by one before the
   * next batch, each in its own transaction. A failed batch wrote nothing: every item is
   * retried alone.
   */
  private async commit (batch: Item[]): Promise<Settle | undefined> {
    const started = performance.now()
    const plan = this.plan(batch)
    const works: Array<Item & { kind: 'work' }> = []
    for (const i of batch) if (i.kind === 'work') works.push(i)
    const out: unknown[] = new Array(batch.length)
    const written: Array<boolean | undefined> = new Array(batch.length)
    const handed: ClaimedDelivery[] = []
    try {
      if (works.length === 0 && plan.born.length === 0) {
        if (plan.items.length > 0) this.answer(plan, await this.bounded(this.write(this.sql, plan.first, handed)), out, written)
      } else {
        await this.bounded(this.sql.begin(async (tx) => {
          if (plan.items.length > 0) {
            const w = await this.write(tx, plan.first, handed)
            this.answer(plan, w, out, written)
            await this.completeBorn(tx, plan.born, w, handed)
          }
          // Every item settles before COMMIT or ROLLBACK. With Promise.all the first failure would
          // roll back while siblings are still mid-work; their later statements would then run on
          // the released connection outside any transaction (autocommitted), and the per-item
          // retry below would apply them a second time.
          const settled = await Promise.allSettled(works.map(i => i.work(tx)))
          const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected')
          if (failed) throw failed.reason
          let k = 0
          for (let n = 0; n < batch.length; n++) {
            if (batch[n].kind !== 'work') continue
            out[n] = (settled[k++] as PromiseFulfilledResult<unknown>).value
            written[n] = true
          }
        }))
      }
    } catch (err) {
      // A webhook registered since an account's last completion: nothing was written; written
      // again, every event built.
      const stale = isStaleHookless(err)
      if (stale) this.hookless.forget()
      // The database is away: retrying item by item would only wait again per item.
      if ((batch.length === 1 && !stale) || isDbUnavailable(err)) { for (const i of batch) i.reject(err); return }
      this.stats.fallbacks++
      await this.oneByOne(batch)
      return
    }
    this.handOver(handed)
    this.stats.transactions++
    const left: Item[] = []
    for (let n = 0; n < batch.length; n++) if (written[n] !== true) left.push(batch[n])
    this.stats.items += batch.length - left.length
    observeCommit(batch.length - left.length, (performance.now() - started) / 1000) // metrics (src/worker-stats.ts)
    const settle = () => { for (let n = 0; n < batch.length; n++) if (written[n] === true) (batch[n].resolve as (v: unknown) => void)(out[n]) }
    if (left.length === 0) return settle
    // Creations the statement could not charge run one by one before the next batch (their
    // balance stamps must follow this statement's); the written items are answered first.
    settle()
    await this.oneByOne(left)
  }

  /**
   * The batch statement's parts. A transition its batch supersedes (a later one of the same
   * job, or the job's completion) is not sent: one statement cannot update a row twice, and
   * the later write sets everything it would have.
   */
  private plan (batch: Item[]): Plan {
    const records: Array<RouteRecord | null> = []
    const plan: Plan = { first: { creations: [], records, completions: [], transitions: [] }, born: [], items: [], created: [], completed: [], moved: [] }
    const f = plan.first
    for (let n = 0; n < batch.length; n++) {
      const i = batch[n]
      if (i.kind === 'create') {
        f.creations.push(bornCompleted(i.row) ? { ...i.row, status: 'processing' } : i.row)
        records.push(i.record)
        plan.created.push(n)
        if (bornCompleted(i.row)) plan.born.push(i)
      } else if (i.kind === 'complete') {
        f.completions.push(i.completion)
        plan.completed.push(n)
      }
    }
    let superseded: Set<string> | null = null
    for (let n = batch.length - 1; n >= 0; n--) {
      const i = batch[n]
      if (i.kind !== 'transition') continue
      if (superseded === null) superseded = new Set(f.completions.map(c => c.row.id))
      plan.moved.push(n)
      if (superseded.has(i.transition.id)) continue
      superseded.add(i.transition.id)
      f.transitions.push(i.transition)
    }
    for (let n = 0; n < batch.length; n++) if (batch[n].kind !== 'work') plan.items.push(batch[n])
    return plan
  }

  /**
   * Fills `out` and `written` for the items the statement wrote: a completion with whether it
   * completed its job, a creation with its own balance (the account's final one plus what its
   * later jobs in the batch cost), every transition. A creation of an account the statement
   * could not charge is left unwritten.
   */
  private answer (plan: Plan, w: BatchWritten, out: unknown[], written: Array<boolean | undefined>): void {
    const f = plan.first
    this.stats.together += plan.items.length
    for (let k = 0; k < plan.completed.length; k++) {
      out[plan.completed[k]] = w.completed.has(f.completions[k].row.id)
      written[plan.completed[k]] = true
    }
    for (const n of plan.moved) written[n] = true
    if (f.creations.length === 0) return
    const seq = ++this.seq
    const later = new Map<number, number>()
    for (let k = f.creations.length - 1; k >= 0; k--) {
      const r = f.creations[k]
      const c = w.charged.get(r.account_id)
      if (c === undefined) continue
      const after = later.get(r.account_id) ?? 0
      out[plan.created[k]] = { credits: c.credits + after, free_videos_used: c.free_videos_used, seq } satisfies Charged
      written[plan.created[k]] = true
      later.set(r.account_id, after + r.credits_charged)
    }
  }

  /** The second statement of a transaction with creations born completed: their completions, for those charged. */
  private async completeBorn (tx: Tx, born: Array<Item & { kind: 'create' }>, w: BatchWritten, handed: ClaimedDelivery[]): Promise<void> {
    const completions: Completion[] = []
    for (const i of born) {
      if (w.charged.has(i.row.account_id)) completions.push({ row: i.row, resultUrl: i.row.result_url!, at: i.row.completed_at! })
    }
    if (completions.length > 0) await this.write(tx, { creations: [], records: [], completions, transitions: [] }, handed)
  }

  /** Each item in a transaction of its own (a failed batch, or creations a batch statement could not charge): the batch statement with one row. */
  private async oneByOne (items: Item[]): Promise<void> {
    for (const item of items) {
      try {
        const v = await this.bounded(this.alone(item))
        this.stats.transactions++
        this.stats.items++
        ;(item.resolve as (v: unknown) => void)(v)
      } catch (e) { item.reject(e) }
    }
  }

  private async alone (i: Item): Promise<unknown> {
    const none = { creations: [], records: [], completions: [], transitions: [] }
    const handed: ClaimedDelivery[] = []
    switch (i.kind) {
      case 'work': return this.sql.begin(tx => i.work(tx))
      case 'complete': {
        const done = (await this.write(this.sql, { ...none, completions: [i.completion] }, handed)).completed.has(i.completion.row.id)
        this.handOver(handed)
        return done
      }
      case 'transition': await writeBatch(this.sql, { ...none, transitions: [i.transition] }); return
      case 'create': {
        const born = bornCompleted(i.row)
        const one: BatchWrite = { ...none, creations: [born ? { ...i.row, status: 'processing' } : i.row], records: [i.record] }
        const write = async (q: Sql | Tx): Promise<Charged> => {
          const w = await writeBatch(q, one)
          const c = w.charged.get(i.row.account_id)
          if (c === undefined) throw new ChargeRefused()
          const charged = this.stamp({ credits: c.credits, free_videos_used: c.free_videos_used })
          if (born) await this.completeBorn(q as Tx, [i], w, handed)
          return charged
        }
        const charged = await (born ? this.sql.begin(tx => write(tx)) : write(this.sql))
        this.handOver(handed)
        return charged
      }
    }
  }
}
