import { ApiError } from '../errors.js'
import { within } from '../db/connect.js'
import { creditAccount, loadAccountView, recordViolation } from '../db/accounts.js'
import { activeCountsByKey, findJobByIdempotencyKey, getJob, idemPair, type IdemRow } from '../db/jobs.js'
import { newJobId } from '../jobs/id.js'
import type { AccountView, BatchView, CreatedJobView } from '../domain.js'
import { runBatch, type BatchReq } from './batch.js'
import { submitAndCommit, createdOf, NO_PROVIDER_NOW, type ActorDeps, type Creation, type CreateReq } from './creation.js'
import { bindIdem, decideIdempotency, isTrialVideo, mayBeStale, refuseAccount, refuseBalance, type Held, type IdemEntry } from './decide.js'
import { LiveJobs } from './live-jobs.js'
import { Mailbox } from './mailbox.js'
import type { Charged } from './group-commit.js'
import type { ShardRequests } from './protocol.js'
import { KeySlots } from './slots.js'

const noop = (): void => {}

export type { ActorDeps } from './creation.js'
export { createdOf } from './creation.js'
export { PRICING_URL } from './decide.js'

/**
 * One account (docs/architecture.md "Threads"). It only sequences: decisions are decide.ts's pure functions over
 * this memory (balance, holds, per-key slots, idempotency index), durable writes are
 * src/db/ledger.ts's through the shard's group commit, and memory takes the values the
 * database RETURNed after COMMIT. Across nodes the conditional charge decides balance and free
 * video, Redis (slots.ts, inflight.ts) the per-key in-flight count. Running jobs: live-jobs.ts.
 */
export class AccountActor {
  readonly mailbox = new Mailbox()
  state: AccountView | null = null
  readonly held: Held = { credits: 0, trialVideos: 0 }
  readonly slots: KeySlots
  readonly live: LiveJobs
  private readonly idem = new Map<string, IdemEntry>()
  readonly batchIdem = new Map<string, Promise<BatchView>>()
  /** Eviction bookkeeping (eviction.ts): messages not answered yet, last use. */
  busy = 0
  usedAt = 0

  constructor (readonly id: number, readonly deps: ActorDeps) {
    this.slots = new KeySlots(id, deps.inflight, (msg, extra) => this.log(msg, extra))
    this.live = new LiveJobs(this)
  }

  get jobs () { return this.live.jobs }
  log (msg: string, extra?: Record<string, unknown>): void { this.deps.log('warn', msg, { account: this.id, ...extra }) }

  /** Balance and flags from the table; with `counts` also the in-flight jobs per key. */
  private async fetch (counts: boolean): Promise<AccountView> {
    // Balances stamped before this read are in it (or older than it): they no longer apply.
    const seq = this.deps.commit.stamped
    const [v, c] = await within(Promise.all([loadAccountView(this.deps.sql, this.id), counts ? activeCountsByKey(this.deps.sql, this.id) : null]))
    if (!v) throw new ApiError('USER_NOT_FOUND', 'Account does not exist')
    this.state = v
    this.balanceSeq = seq
    if (c) this.slots.reset(c)
    return v
  }

  /** GroupCommit.stamp() number of the balance in `state`. */
  private balanceSeq = 0

  /** A committed balance, kept unless a later one was seen (commits settle in any order). */
  applyBalance (credits: number, seq: number, freeVideosUsed?: number): boolean {
    const s = this.state
    if (!s || seq < this.balanceSeq) return false
    this.balanceSeq = seq
    s.credits = credits
    if (freeVideosUsed !== undefined) s.free_videos_used = freeVideosUsed
    return true
  }

  /** A commit's outcome is unknown (database lost mid-commit): reload before deciding. */
  stale = false

  load (): Promise<AccountView> | AccountView {
    if (this.state && !this.stale) return this.state
    return this.fetch(true).then((v) => { this.stale = false; return v })
  }

  /** With several nodes every read is the committed row: others change it too. */
  get (): Promise<AccountView> {
    return this.mailbox.post(async () => ({ ...(this.deps.multiNode ? await this.fetch(this.state === null) : await this.load()) }))
  }

  /** Reloads flags and balance (after an operator PATCH or a refused conditional charge). */
  reload (): Promise<AccountView> { return this.mailbox.post(async () => ({ ...(await this.fetch(false)) })) }

  credit (req: ShardRequests['account.credit']['req']): Promise<AccountView> {
    return this.mailbox.post(async () => {
      const s = await this.load()
      if (!Number.isInteger(req.credits) || req.credits <= 0) throw new ApiError('VALIDATION_ERROR', 'credits must be a positive integer')
      const commit = this.deps.commit
      const balance = await commit.run(tx => creditAccount(tx, this.id, req, credits => commit.stamp({ credits })))
      if (balance === null) throw new ApiError('USER_NOT_FOUND', 'Account does not exist')
      this.applyBalance(balance.credits, balance.seq)
      if (req.kind === 'purchase') s.has_purchased = true
      return { ...s }
    })
  }

  /** Counts a content-policy violation; at the threshold the account is suspended. */
  violation (): Promise<{ violations: number; banned: boolean }> {
    return this.mailbox.post(async () => {
      const s = await this.load()
      const row = await this.deps.commit.run(tx => recordViolation(tx, this.id, this.deps.violationThreshold))
      s.banned = row.banned
      return { violations: row.policy_violations, banned: row.banned }
    })
  }

  /** POST /generate/*, /extend/video (docs/api.md "Jobs"): decide in the mailbox, then submit and commit. */
  async createJob (req: CreateReq): Promise<{ created: CreatedJobView; replayed: boolean }> {
    const d = await this.mailbox.post(() => this.decide(req))
    if (d.kind === 'wait') { await d.pending; return this.createJob(req) }
    if (d.kind === 'replay') return { created: await this.replay(d.jobId), replayed: true }
    const key = req.idempotencyKey
    try {
      const created = await submitAndCommit(this, req, d)
      if (key !== undefined) bindIdem(this.idem, key, req.fingerprint, created.id)
      return { created, replayed: false }
    } catch (err) {
      // Only creations are remembered: a 402 may be retried with the same key. A 504 created
      // a job (details.job_id), so its key stays bound to that job.
      if (key !== undefined) {
        const jobId = err instanceof ApiError && err.code === 'GATEWAY_TIMEOUT' ? (err.extra?.details as { job_id?: string })?.job_id : undefined
        if (jobId) bindIdem(this.idem, key, req.fingerprint, jobId)
        else this.idem.delete(key)
      }
      throw err
    } finally { d.settle() }
  }

  private async decide (req: CreateReq) {
    await this.load()
    const key = req.idempotencyKey
    if (key !== undefined) {
      let e = this.idem.get(key)
      if (e === undefined) {
        // Not in memory: the database's answer, batched with the other keys of this turn
        // (docs/architecture.md "Durability", Idempotency).
        const read: Promise<Pick<IdemRow, 'id' | 'request_hash'> | undefined> = this.deps.idem ? this.deps.idem.get(idemPair(this.id, key)) : findJobByIdempotencyKey(this.deps.sql, this.id, key)
        const row = await within(read)
        if (row) { e = { fingerprint: row.request_hash ?? '', jobId: row.id }; this.idem.set(key, e) }
      }
      const i = decideIdempotency(e, req.fingerprint)
      if (i.kind === 'refuse') throw i.error
      if (i.kind !== 'new') return i
    }
    const id = newJobId()
    let trial: boolean
    try { trial = await this.admit(req, id) } catch (err) {
      // Another node may have charged, refunded or finished jobs: reload once, then decide.
      const counted = this.slots.shared && err instanceof ApiError && err.code === 'concurrency_limit_reached'
      if (!this.deps.multiNode || !mayBeStale(err) || counted) throw err
      await this.fetch(true)
      trial = await this.admit(req, id)
    }
    this.held.credits += req.spec.credits
    if (trial) this.held.trialVideos++
    this.slots.hold(req.keyId)
    // Only a creation under an Idempotency-Key has others to wake (a retry waiting on it).
    if (key === undefined) return { kind: 'new' as const, id, trial, settle: noop }
    let settle!: () => void
    const pending = new Promise<void>(resolve => { settle = resolve })
    this.idem.set(key, { fingerprint: req.fingerprint ?? '', pending })
    return { kind: 'new' as const, id, trial, settle }
  }

  /** The checks in the API's order (ban/lock, trial, concurrency, balance, circuit). Returns `trial`. */
  private async admit (req: CreateReq, id: string): Promise<boolean> {
    const s = this.state!
    const refused = refuseAccount(s, this.held, req.spec)
    if (refused) throw refused
    const inRedis = await this.slots.take(req, id)
    const late = refuseBalance(s, this.held, req.spec) ??
      (this.deps.providers.routesFor(req.spec.model).some(r => !r.breaker.open) ? null : new ApiError('PROVIDER_ERROR', NO_PROVIDER_NOW))
    if (late) { if (inRedis) this.slots.free(req.keyId, id); throw late }
    return isTrialVideo(s, req.spec)
  }

  /** A decided creation ended: committed (memory takes the RETURNed balance) or not. */
  settled (c: Creation, keyId: number | null, committed: Charged | null, running: boolean): void {
    this.held.credits -= c.spec.credits
    if (c.trial) this.held.trialVideos--
    if (committed) this.applyBalance(committed.credits, committed.seq, committed.free_videos_used)
    this.slots.settle(keyId, c.id, running)
  }

  private async replay (jobId: string): Promise<CreatedJobView> {
    const row = this.jobs.get(jobId)?.row ?? await within(getJob(this.deps.sql, jobId))
    if (!row) throw new ApiError('INTERNAL_ERROR', 'Replayed job vanished')
    const created: CreatedJobView = { ...createdOf(row, (await this.get()).credits), replayed: true }
    // A completed job's replay carries its result_url, as a synchronous voiceover's 201 did.
    if (row.status === 'completed') created.result_url = row.result_url
    return created
  }

  createBatch (req: BatchReq): Promise<BatchView> { return runBatch(this, req) }
}
