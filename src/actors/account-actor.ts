import { ApiError } from '../errors.js'
import { applyCredit, loadAccountView, recordPurchase } from '../db/accounts.js'
import { dbUnavailable, isDbUnavailable, type Sql } from '../db/connect.js'
import {
  activeCountsByKey, chargeAndInsertJob, findBatch, LEASE_MS, findJobByIdempotencyKey, finishJob, getJob, insertBatch, insertImage,
  insertVideo, setFreeVideosUsed, updateJobProgress, videoIdOfJob,
} from '../db/jobs.js'
import { newJobId } from '../jobs/id.js'
import { enqueueJobEvent } from '../db/outbox.js'
import { directiveTextOf } from '../jobs/spec.js'
import { TERMINAL as TERMINAL_STATUSES, viewOf, type JobRow, type JobStatus, type JobView } from '../jobs/view.js'
import type { Providers, Route } from '../providers/registry.js'
import { UpstreamRefused, UpstreamUnavailable, type ProviderJob, type UpstreamHandle, type UpstreamState } from '../providers/provider.js'
import type { ResultRules } from '../providers/results.js'
import { appendEvents, recordLateSuccess, recordSubmission, setVideoMedia, type UpstreamEvent } from '../db/upstream.js'
import { embedUrlOf } from '../providers/library-media.js'
import { deadlineOf, submitOn } from './upstream-jobs.js'
import type { Storage } from '../storage/storage.js'
import type { GroupCommit } from './group-commit.js'
import { JobActor, type JobHost, type UpstreamJobRow } from './job-actor.js'
import { Mailbox } from './mailbox.js'
import { observeProvider } from '../worker-stats.js'
import type { AccountView, BatchItemView, BatchView, CreatedJobView, JobCaller, JobSpec, ShardEvent, ShardRequests } from './protocol.js'

export interface ActorDeps {
  sql: Sql
  commit: GroupCommit
  providers: Providers
  storage: Storage
  simSpeed: number
  submitTimeoutMs: number
  /** Where provider callbacks arrive (PUBLIC_BASE_URL). */
  publicBaseUrl: string
  /** Result downloads (issue 11 point 6). */
  resultRules: ResultRules
  /** Content-policy hits before the account is suspended. */
  violationThreshold: number
  /** This node's id: new jobs are leased to it (DESIGN.md 4). */
  nodeId: string
  /** REDIS_URL is set: other nodes may change this account too. */
  multiNode: boolean
  emit: (ev: ShardEvent) => void
  log: (level: 'info' | 'warn' | 'error', msg: string, extra?: Record<string, unknown>) => void
}

/** Where the free trial and upgrade prompts point (SPEC.md 7, upgrade_required). */
export const PRICING_URL = '/v1/credits/pricing'

type IdemEntry = { fingerprint: string; jobId: string } | { fingerprint: string; pending: Promise<unknown> }

/**
 * One account (DESIGN.md section 2): balance, flags, free-trial state, idempotency index,
 * in-flight jobs per key, and its JobActors. Loaded from PostgreSQL on first use. Decisions
 * (402/403/429) are made from memory inside the mailbox; the durable work (charge, job row,
 * ledger) goes through the shard's group commit and memory changes only after COMMIT.
 */
export class AccountActor implements JobHost {
  readonly mailbox = new Mailbox()
  private state: AccountView | null = null
  /** Credits held by creations that are between decision and commit. */
  private reserved = 0
  /** Free-trial videos held likewise. */
  private trialReserved = 0
  private readonly inFlight = new Map<number | null, number>()
  /** Creations decided but not committed yet, per key (part of inFlight). */
  private readonly pendingByKey = new Map<number | null, number>()
  private readonly idem = new Map<string, IdemEntry>()
  /** Keys remembered in memory; older ones are looked up in the jobs table again. */
  private static readonly IDEM_MEMORY = 10_000
  private readonly batchIdem = new Map<string, Promise<BatchView>>()
  readonly jobs = new Map<string, JobActor>()
  private violations = 0
  /** A commit's outcome is unknown (database lost mid-commit): reload from the tables first. */
  private stale = false

  constructor (readonly id: number, private readonly deps: ActorDeps) {}

  get storage (): Storage { return this.deps.storage }
  get resultRules (): ResultRules { return this.deps.resultRules }
  log (msg: string, extra?: Record<string, unknown>): void { this.deps.log('warn', msg, { account: this.id, ...extra }) }

  private async load (): Promise<AccountView> {
    if (this.state && this.stale) { await this.refresh(); this.stale = false }
    if (this.state) return this.state
    const [v, counts] = await Promise.all([loadAccountView(this.deps.sql, this.id), activeCountsByKey(this.deps.sql, this.id)])
    if (!v) throw new ApiError('USER_NOT_FOUND', 'Account does not exist')
    this.state = v
    this.inFlight.clear()
    for (const [k, n] of counts) this.inFlight.set(k, n)
    return v
  }

  get (): Promise<AccountView> {
    return this.mailbox.post(async () => ({ ...(await this.load()) }))
  }

  /** Balance, flags and in-flight counts from the tables (multi-node: before refusing). */
  private async refresh (): Promise<void> {
    const [v, counts] = await Promise.all([loadAccountView(this.deps.sql, this.id), activeCountsByKey(this.deps.sql, this.id)])
    if (!v) throw new ApiError('USER_NOT_FOUND', 'Account does not exist')
    this.state = v
    this.inFlight.clear()
    for (const [k, n] of counts) this.inFlight.set(k, n)
    // Creations decided but not yet committed here are not in the tables yet.
    for (const j of this.pendingByKey) this.inFlight.set(j[0], (this.inFlight.get(j[0]) ?? 0) + j[1])
  }

  /** Reloads flags and balance (after an operator PATCH or a refused conditional charge). */
  reload (): Promise<AccountView> {
    return this.mailbox.post(async () => {
      const v = await loadAccountView(this.deps.sql, this.id)
      if (!v) throw new ApiError('USER_NOT_FOUND', 'Account does not exist')
      this.state = v
      return { ...v }
    })
  }

  credit (req: ShardRequests['account.credit']['req']): Promise<AccountView> {
    return this.mailbox.post(async () => {
      const s = await this.load()
      if (!Number.isInteger(req.credits) || req.credits <= 0) throw new ApiError('VALIDATION_ERROR', 'credits must be a positive integer')
      const balance = await this.deps.commit.run(async (tx) => {
        const b = await applyCredit(tx, this.id, req.credits, req.kind, null, req.note ?? null)
        if (req.kind === 'purchase') await recordPurchase(tx, this.id, req.credits, req.currency ?? null, req.amount ?? null)
        return b
      })
      if (balance === null) throw new ApiError('USER_NOT_FOUND', 'Account does not exist')
      s.credits += req.credits
      if (req.kind === 'purchase') s.has_purchased = true
      return { ...s }
    })
  }

  /** Counts a content-policy violation; at the threshold the account is suspended. */
  violation (): Promise<{ violations: number; banned: boolean }> {
    return this.mailbox.post(async () => {
      const s = await this.load()
      const [row] = await this.deps.commit.run(tx => tx<{ policy_violations: number; banned: boolean }[]>`
        UPDATE accounts SET policy_violations = policy_violations + 1,
          banned = banned OR policy_violations + 1 >= ${this.deps.violationThreshold}, updated_at = now()
        WHERE id = ${this.id} RETURNING policy_violations, banned`)
      this.violations = row.policy_violations
      s.banned = row.banned
      return { violations: row.policy_violations, banned: row.banned }
    })
  }

  // ---- creation ---------------------------------------------------------------------------

  private available (): number { return this.state!.credits - this.reserved }

  private async replay (jobId: string): Promise<{ created: CreatedJobView; replayed: boolean }> {
    const a = this.jobs.get(jobId)
    const row = a ? a.row : await getJob(this.deps.sql, jobId)
    if (!row) throw new ApiError('INTERNAL_ERROR', 'Replayed job vanished')
    const created: CreatedJobView = { ...createdOf(row, this.state!.credits), replayed: true }
    // The original 201 of a synchronous voiceover carried its result_url; so does its replay
    // (and a replay of any job completed since then).
    if (row.status === 'completed') created.result_url = row.result_url
    return { created, replayed: true }
  }

  /**
   * POST /generate/*, /extend/video (SPEC.md 4.3-4.6). Order of checks, nothing charged on
   * any refusal: ban/lock, free trial, concurrency, balance, circuit breaker. Then the provider
   * is asked (DESIGN.md 5) and the charge, job row and ledger entry commit together before
   * the answer leaves. See docs/decisions.md "Submission order" for crash recovery.
   */
  async createJob (req: ShardRequests['job.create']['req']): Promise<{ created: CreatedJobView; replayed: boolean }> {
    const key = req.idempotencyKey
    // Decide and reserve, serialised with every other decision of this account.
    const decision = await this.mailbox.post(async () => {
      await this.load()
      if (key !== undefined) {
        let e = this.idem.get(key)
        if (e === undefined) {
          const row = await findJobByIdempotencyKey(this.deps.sql, this.id, key)
          if (row) { e = { fingerprint: row.request_hash ?? '', jobId: row.id }; this.idem.set(key, e) }
        }
        if (e !== undefined) {
          if (e.fingerprint !== req.fingerprint) throw new ApiError('IDEMPOTENCY_CONFLICT')
          return { kind: 'replay' as const, entry: e }
        }
      }
      try {
        this.check(req, req.spec)
      } catch (err) {
        // Several nodes share the account: this actor's balance or in-flight count may be
        // stale (another node charged, refunded or finished jobs). Refresh once, then decide.
        if (!this.deps.multiNode || !(err instanceof ApiError) || !['INSUFFICIENT_CREDITS', 'concurrency_limit_reached', 'upgrade_required'].includes(err.code)) throw err
        await this.refresh()
        this.check(req, req.spec)
      }
      const trial = this.isTrialVideo(req.spec)
      this.reserved += req.spec.credits
      if (trial) this.trialReserved++
      this.inFlight.set(req.keyId, (this.inFlight.get(req.keyId) ?? 0) + 1)
      this.pendingByKey.set(req.keyId, (this.pendingByKey.get(req.keyId) ?? 0) + 1)
      let settle!: (v: unknown) => void
      const pending = new Promise(resolve => { settle = resolve })
      if (key !== undefined) this.idem.set(key, { fingerprint: req.fingerprint ?? '', pending })
      return { kind: 'new' as const, trial, settle }
    })

    if (decision.kind === 'replay') {
      const e = decision.entry
      if ('pending' in e) {
        await e.pending // the first request with this key is still in flight: wait for it
        return this.createJob(req) // then answer as a replay (or retry if it failed)
      }
      return this.replay(e.jobId)
    }
    try {
      const created = await this.submitAndCommit(req, decision.trial)
      if (key !== undefined) {
        this.idem.delete(key)
        this.idem.set(key, { fingerprint: req.fingerprint ?? '', jobId: created.id })
        this.trimIdem()
      }
      return { created, replayed: false }
    } catch (err) {
      // Only successful creations are remembered: a 402 may be retried with the same key.
      // A 504 created a job, so its key stays bound to that job.
      if (key !== undefined) {
        const jobId = err instanceof ApiError && err.code === 'GATEWAY_TIMEOUT' ? (err.extra?.details as { job_id?: string })?.job_id : undefined
        if (jobId) this.idem.set(key, { fingerprint: req.fingerprint ?? '', jobId })
        else this.idem.delete(key)
      }
      throw err
    } finally {
      decision.settle(undefined)
    }
  }

  /** Bounds the idempotency index: settled entries beyond IDEM_MEMORY, oldest first, go. */
  private trimIdem (): void {
    let excess = this.idem.size - AccountActor.IDEM_MEMORY
    if (excess <= 0) return
    for (const [k, e] of this.idem) {
      if (excess <= 0) break
      if ('pending' in e) continue
      this.idem.delete(k)
      excess--
    }
  }

  private isTrialVideo (spec: JobSpec): boolean {
    const s = this.state!
    return !s.has_purchased && !s.enterprise && (spec.type === 'video' || spec.type === 'extend')
  }

  /** The in-memory checks, in SPEC order; throws the refusal. */
  private check (caller: JobCaller, spec: JobSpec): void {
    const s = this.state!
    if (s.banned) throw new ApiError('ACCOUNT_BANNED')
    if (s.credits_locked) throw new ApiError('NOT_ELIGIBLE', 'Credits on this account are locked', { reason: 'credits_locked', reasons: ['credits_locked'] })
    if (this.isTrialVideo(spec) && s.free_videos_used + this.trialReserved >= 1) {
      throw new ApiError('upgrade_required', 'The free trial includes one video; buy credits to make more', { pricing_url: PRICING_URL })
    }
    const n = this.inFlight.get(caller.keyId) ?? 0
    if (n >= caller.maxConcurrent) {
      throw new ApiError('concurrency_limit_reached', `This key already has ${n} jobs in flight (max ${caller.maxConcurrent}); nothing was charged`, { max_concurrent: caller.maxConcurrent, in_flight: n })
    }
    if (this.available() < spec.credits) {
      throw new ApiError('INSUFFICIENT_CREDITS', `This job costs ${spec.credits} credits; the balance is ${Math.max(0, this.available())}`, { required: spec.credits, available: Math.max(0, this.available()) })
    }
    if (!this.deps.providers.routesFor(spec.model).some(r => !r.breaker.open)) throw new ApiError('PROVIDER_ERROR', 'The provider is temporarily unavailable (circuit open); nothing was charged')
  }

  private unpend (keyId: number | null): void {
    const n = (this.pendingByKey.get(keyId) ?? 1) - 1
    if (n <= 0) this.pendingByKey.delete(keyId)
    else this.pendingByKey.set(keyId, n)
  }

  private release (spec: JobSpec, keyId: number | null, trial: boolean): void {
    this.unpend(keyId)
    this.reserved -= spec.credits
    if (trial) this.trialReserved--
    this.decInFlight(keyId)
  }

  private decInFlight (keyId: number | null): void {
    const n = (this.inFlight.get(keyId) ?? 1) - 1
    if (n <= 0) this.inFlight.delete(keyId)
    else this.inFlight.set(keyId, n)
  }

  private async submitAndCommit (req: ShardRequests['job.create']['req'], trial: boolean): Promise<CreatedJobView> {
    const spec = req.spec
    const routes = this.deps.providers.routesFor(spec.model)
    const id = newJobId()
    const now = new Date()
    const pj: ProviderJob = { id, type: spec.type, model: spec.model, text: spec.directiveText, estimatedSeconds: spec.estimated_seconds, request: spec.request }
    const row: UpstreamJobRow = {
      id,
      account_id: this.id,
      key_id: req.keyId,
      type: spec.type,
      model: spec.model,
      status: 'submitted',
      prompt: spec.prompt,
      request: spec.request,
      progress: 0,
      credits_charged: spec.credits,
      credits_refunded: 0,
      estimated_seconds: spec.estimated_seconds,
      result_url: null,
      error_message: null,
      content_policy_violation: false,
      provider: routes[0].provider.name,
      provider_job_id: null,
      idempotency_key: req.idempotencyKey ?? null,
      request_hash: req.fingerprint ?? null,
      source_job_id: spec.source_job_id ?? null,
      free_trial: trial,
      deadline_at: deadlineOf(routes[0], spec.estimated_seconds, this.deps.simSpeed, now.getTime()),
      created_at: now,
      updated_at: now,
      completed_at: null,
      owner: this.deps.nodeId,
      lease_until: new Date(now.getTime() + LEASE_MS),
    }

    // Routes in order (issue 11 point 3): an open breaker or a refusal tries the next route; a
    // route without room makes the job `queued` on it (charged, submitted when room frees).
    let submission: Promise<UpstreamHandle> | null = null
    let timedOut = false
    let handle: UpstreamHandle | null = null
    let route: Route | null = null
    let holds = false
    const events: UpstreamEvent[] = []
    let lastError: unknown = null
    let retryAfterMs = 0
    for (const r of routes) {
      if (!r.breaker.allow()) continue
      route = r
      row.provider = r.provider.name
      row.deadline_at = deadlineOf(r, spec.estimated_seconds, this.deps.simSpeed, now.getTime())
      if (!r.hasRoom(pj)) { row.status = 'queued'; break }
      r.acquire()
      holds = true
      const submitted = performance.now()
      submission = submitOn(r, pj, spec.prompt, this.deps.publicBaseUrl)
      let timer: NodeJS.Timeout | undefined
      const answer = await Promise.race([
        submission.then(v => ({ ok: true as const, v }), e => ({ ok: false as const, e })),
        new Promise<null>(resolve => { timer = setTimeout(() => resolve(null), this.deps.submitTimeoutMs) }),
      ])
      clearTimeout(timer)
      observeProvider(r.provider.name, (performance.now() - submitted) / 1000, answer !== null && answer.ok) // metrics
      if (answer === null) { timedOut = true; break }
      if (answer.ok) {
        r.breaker.success()
        handle = answer.v
        row.provider_job_id = handle.id
        row.upstream = handle
        row.route = r.key
        row.submitted_at = new Date()
        if (r.recordsHistory) events.push({ job_id: id, source: 'submit', route: r.key, state: 'submitted', detail: { upstream_id: handle.id } })
        break
      }
      r.release()
      holds = false
      submission = null
      if (answer.e instanceof UpstreamUnavailable && answer.e.httpStatus === 429) {
        // The provider is at capacity for us: like a full route, the job is charged and
        // `queued`, and submitted again after Retry-After (issue 11 point 7).
        row.status = 'queued'
        retryAfterMs = answer.e.retryAfterMs ?? 1000
        if (r.recordsHistory) events.push({ job_id: id, source: 'refused', route: r.key, state: 'rate_limited', detail: { retry_after_ms: retryAfterMs } })
        break
      }
      // Refused (definitive) or unavailable (indefinite): nothing is charged for this route;
      // the next route is tried. An indefinite error may leave an orphan upstream job: it costs
      // us, never the client (docs/decisions.md).
      r.breaker.failure()
      lastError = answer.e
      if (r.recordsHistory) events.push({ job_id: id, source: 'refused', route: r.key, state: answer.e instanceof UpstreamRefused ? 'refused' : 'unavailable', detail: { error: String((answer.e as Error)?.message ?? answer.e) } })
      route = null
    }
    if (route === null) {
      this.release(spec, req.keyId, trial)
      if (lastError === null) throw new ApiError('PROVIDER_ERROR', 'The provider is temporarily unavailable (circuit open); nothing was charged')
      const msg = lastError instanceof UpstreamRefused ? lastError.message : 'The provider could not accept the job'
      throw new ApiError('PROVIDER_ERROR', `${msg}; nothing was charged`)
    }
    row.route = route.key

    // voiceover completes synchronously (SPEC.md 4.5): its 201 already carries the result.
    if (handle !== null && spec.model === 'voiceover' && route.provider.simulated) {
      try {
        const st = await route.provider.status(handle, pj)
        if (st.state === 'succeeded' && st.outputs.length) {
          row.status = 'completed'
          row.progress = 100
          row.result_url = st.outputs[0]
          row.completed_at = new Date()
        }
      } catch (err) { this.log('voiceover status failed; completing asynchronously', { job: id, err: String(err) }) }
    }

    try {
      await this.deps.commit.run(async (tx) => {
        // Charge, ledger entry and job row in one statement; a null balance must abort (throw).
        const b = await chargeAndInsertJob(tx, { ...row }, `${spec.type} ${spec.model}`)
        if (b === null) throw new ApiError('INSUFFICIENT_CREDITS', `This job costs ${spec.credits} credits; the balance does not cover it`)
        if (trial) await setFreeVideosUsed(tx, this.id, 1)
        // Route and handle of a configured route (the implicit simulated route needs neither:
        // its handle is its id), and the history so far.
        if (route!.recordsHistory && handle !== null) await recordSubmission(tx, id, { route: route!.key, provider: route!.provider.name, handle, deadline: row.deadline_at, at: row.submitted_at! })
        else if (route!.recordsHistory) await tx`UPDATE jobs SET route = ${route!.key} WHERE id = ${id}`
        if (events.length) await appendEvents(tx, events)
        // A job born completed (synchronous voiceover) never reaches complete(): its
        // job.completed webhook rows are written here, in the same transaction (DESIGN.md 3).
        if (row.status === 'completed') await enqueueJobEvent(tx, this.id, viewOf(row), webhookOf(row), row.completed_at!)
      })
    } catch (err) {
      this.release(spec, req.keyId, trial)
      if (holds) route.release()
      if (handle) route.provider.cancel(handle).catch(() => {})
      else if (submission) submission.then(h => route!.provider.cancel(h), () => {}).catch(() => {})
      if (err instanceof ApiError && err.code === 'INSUFFICIENT_CREDITS') {
        // Another node spent the balance: refresh it from the database.
        await this.reload().catch(() => {})
        throw err
      }
      if (isDbUnavailable(err)) {
        // Issue 15: the database went away mid-commit, so the outcome is unknown (COMMIT may
        // have landed). Reload balance and counts from the tables at next use; a retry with the
        // same Idempotency-Key finds the job if it was committed.
        this.stale = true
        throw dbUnavailable('The database is unreachable; the job may not have been recorded. Retry with the same Idempotency-Key')
      }
      this.deps.log('error', 'job commit failed', { account: this.id, err: String(err) })
      throw new ApiError('INTERNAL_ERROR', 'The job could not be recorded; nothing was charged. Safe to retry with the same Idempotency-Key')
    }
    const s = this.state!
    s.credits -= spec.credits
    this.reserved -= spec.credits
    this.unpend(req.keyId)
    if (trial) { this.trialReserved--; s.free_videos_used++ }

    if (row.status === 'completed') {
      if (holds) route.release()
      this.decInFlight(req.keyId)
      this.emit(row)
    } else {
      const job = this.adopt(row, pj, routes.indexOf(route), handle)
      if (holds) job.took(route)
      if (retryAfterMs > 0) job.retryAfter(retryAfterMs)
      this.emit(row)
      if (timedOut && submission) {
        job.awaitSubmission(submission)
        throw new ApiError('GATEWAY_TIMEOUT', `The provider did not answer within ${this.deps.submitTimeoutMs} ms; the job ${id} was created and charged and is still running. Poll GET /v1/jobs/${id} instead of resubmitting`, { details: { job_id: id } })
      }
      job.schedule(row.status === 'queued' ? 0 : undefined)
    }
    const created = createdOf(row, s.credits)
    if (row.status === 'completed') created.result_url = row.result_url
    return created
  }

  /** Registers a live JobActor for a committed, non-terminal job (creation or resume). */
  adopt (row: UpstreamJobRow, pj?: ProviderJob, routeIndex?: number, handle?: UpstreamHandle | null): JobActor {
    const job = this.actorFor(row, pj, routeIndex, handle)
    this.jobs.set(row.id, job)
    return job
  }

  private actorFor (row: UpstreamJobRow, pj?: ProviderJob, routeIndex?: number, handle?: UpstreamHandle | null): JobActor {
    const providers = this.deps.providers
    let routes = providers.routesFor(row.model)
    let index = routeIndex ?? 0
    let h = handle ?? row.upstream ?? null
    if (routeIndex === undefined && (row.provider_job_id !== null || row.route)) {
      // A stored job: the route it ran on, whatever the routing file says now.
      const r = providers.routeOf(row.model, row.route ?? null, row.provider)
      index = routes.indexOf(r)
      if (index < 0) { routes = [r]; index = 0 }
      if (h === null && row.provider_job_id !== null) h = { id: row.provider_job_id, model: r.spec.model }
    }
    return new JobActor(row, pj ?? {
      id: row.id,
      type: row.type,
      model: row.model,
      text: directiveTextOf(row.request, row.prompt),
      estimatedSeconds: row.estimated_seconds,
      request: row.request,
    }, routes, this, expectedMs(row, routes[index], this.deps.simSpeed), index, h)
  }

  /** Resume a claimed job (restart, or another node's expired lease). */
  resume (row: JobRow): void {
    if (this.jobs.has(row.id)) return
    if (this.state) {
      // A job taken over from another node counts against its key here from now on.
      this.inFlight.set(row.key_id, (this.inFlight.get(row.key_id) ?? 0) + 1)
    }
    const job = this.adopt(row)
    // A submitted job holds a slot of its route's capacity again.
    if (job.handle !== null) { job.route.acquire(); job.took(job.route) }
    job.schedule(1)
  }

  /**
   * A verified provider callback (issue 11 point 4) for a job of this account. A live job takes
   * it at once (its state, or a poll now for a hint). A job this node does not run (another
   * node holds its lease) is settled here when the callback reports an end: the terminal
   * transition is a conditional UPDATE with the refund in the same transaction, so exactly one
   * node moves the money whichever gets there first (docs/decisions.md).
   */
  callback (jobId: string, state: UpstreamState | undefined): Promise<'live' | 'settled' | 'ignored'> {
    return this.mailbox.post(async () => {
      const live = this.jobs.get(jobId)
      if (live) { live.poke(state); return 'live' as const }
      const row = await getJob(this.deps.sql, jobId) as UpstreamJobRow | undefined
      if (!row || row.account_id !== this.id || TERMINAL_STATUSES.has(row.status) || row.provider_job_id === null) return 'ignored' as const
      await this.load()
      const job = this.actorFor(row)
      // Not registered: it runs one step and is dropped (the owner keeps polling).
      job.oneShot = true
      job.poke(state)
      return 'settled' as const
    })
  }

  /** Route states of this shard (GET /v1/health). */
  routeStates (): ReturnType<Providers['states']> { return this.deps.providers.states() }

  // ---- JobHost: persisted transitions ------------------------------------------------------

  private emit (row: JobRow): void {
    this.deps.emit({ type: 'job.updated', accountId: this.id, job: viewOf(row) })
  }

  progress (job: JobActor, status: JobStatus, progress: number, events: UpstreamEvent[] = []): Promise<void> {
    return this.mailbox.post(async () => {
      if (job.terminal) return
      const at = new Date()
      const ev = job.route.recordsHistory ? events : []
      await this.deps.commit.run(async (tx) => {
        await updateJobProgress(tx, job.id, status, progress, null, at)
        if (ev.length) await appendEvents(tx, ev)
      })
      const r = job.row
      r.status = status
      r.progress = progress
      r.updated_at = at
      this.emit(r)
    })
  }

  /** A queued job (or one whose creation timed out) handed to its provider. */
  submitted (job: JobActor, route: Route, handle: UpstreamHandle, events: UpstreamEvent[]): Promise<void> {
    return this.mailbox.post(async () => {
      if (job.terminal) return
      const at = new Date()
      const deadline = this.deadlineFrom(job, route, at.getTime())
      await this.deps.commit.run(async (tx) => {
        await recordSubmission(tx, job.id, { route: route.key, provider: route.provider.name, handle, deadline, at })
        if (events.length && route.recordsHistory) await appendEvents(tx, events)
      })
      const r = job.row
      r.status = 'submitted'
      r.provider = route.provider.name
      r.provider_job_id = handle.id
      r.upstream = handle
      r.route = route.key
      r.submitted_at = at
      r.deadline_at = deadline
      r.updated_at = at
      this.emit(r)
    })
  }

  record (events: UpstreamEvent[]): Promise<void> {
    if (events.length === 0) return Promise.resolve()
    return this.deps.commit.run(tx => appendEvents(tx, events))
  }

  deadlineFrom (job: JobActor, route: Route, at: number): Date {
    return deadlineOf(route, job.row.estimated_seconds, this.deps.simSpeed, at)
  }

  submitWith (job: JobActor, route: Route): Promise<UpstreamHandle> {
    return submitOn(route, job.pj, job.row.prompt, this.deps.publicBaseUrl)
  }

  complete (job: JobActor, resultUrl: string, events: UpstreamEvent[] = [], thumbnailUrl: string | null = null): Promise<void> {
    return this.mailbox.post(async () => {
      if (job.terminal) return
      const history = job.route.recordsHistory
      const r = job.row
      const at = new Date()
      const final: JobRow = { ...r, status: 'completed', progress: 100, result_url: resultUrl, updated_at: at, completed_at: at }
      const done = await this.deps.commit.run(async (tx) => {
        const ok = await finishJob(tx, r.id, { status: 'completed', progress: 100, result_url: resultUrl, error_message: null, content_policy_violation: false, credits_refunded: 0, at })
        if (!ok) {
          // Already terminal (refunded at our deadline, or settled by another node): a late
          // success moves no money; the operator sees it in the history (issue 11 point 5).
          if (history) await recordLateSuccess(tx, { job_id: r.id, source: 'late', route: job.route.key, state: 'succeeded', detail: { result_url: resultUrl, note: 'upstream success after the job ended; no money moved' } })
          return false
        }
        if (history && events.length) await appendEvents(tx, events)
        await enqueueJobEvent(tx, this.id, viewOf(final), webhookOf(r), at)
        const modelId = r.model
        if (r.type === 'video' || r.type === 'extend') {
          const extendedFrom = r.source_job_id ? await videoIdOfJob(tx, r.source_job_id) : null
          const videoId = await insertVideo(tx, {
            account_id: this.id, job_id: r.id, prompt: r.prompt, model: providerModel(r), model_id: modelId,
            aspect_ratio: (r.request.aspect_ratio as string | null) ?? (r.type === 'extend' ? null : '16:9'),
            video_url: resultUrl, extended_from_video_id: extendedFrom, created_at: r.created_at, completed_at: at,
          })
          await setVideoMedia(tx, videoId, thumbnailUrl, embedUrlOf(this.deps.publicBaseUrl, videoId))
        } else if (r.type === 'image') {
          await insertImage(tx, { account_id: this.id, job_id: r.id, prompt: r.prompt, model: providerModel(r), model_id: modelId, image_url: resultUrl, created_at: r.created_at, completed_at: at })
        }
        return true
      })
      this.finished(job)
      if (!done) { await this.refreshView(r.id); return }
      r.status = 'completed'
      r.progress = 100
      r.result_url = resultUrl
      r.updated_at = at
      r.completed_at = at
      this.emit(r)
    })
  }

  fail (job: JobActor, message: string, policyViolation: boolean, events: UpstreamEvent[] = []): Promise<void> {
    return this.mailbox.post(() => this.terminate(job, 'failed', message, policyViolation, job.route.recordsHistory ? events : []))
  }

  /** failed or cancelled: refund in the same transaction as the terminal state (DESIGN.md 3). */
  private async terminate (job: JobActor, status: 'failed' | 'cancelled', message: string | null, policyViolation: boolean, events: UpstreamEvent[] = []): Promise<void> {
    if (job.terminal) return
    const r = job.row
    const at = new Date()
    const refund = r.credits_charged
    const final: JobRow = { ...r, status, error_message: message, content_policy_violation: policyViolation, credits_refunded: refund, updated_at: at, completed_at: at }
    const done = await this.deps.commit.run(async (tx) => {
      const ok = await finishJob(tx, r.id, { status, progress: r.progress, result_url: null, error_message: message, content_policy_violation: policyViolation, credits_refunded: refund, at })
      if (!ok) return false
      if (events.length) await appendEvents(tx, events)
      await enqueueJobEvent(tx, this.id, viewOf(final), webhookOf(r), at)
      if (refund > 0) await applyCredit(tx, this.id, refund, 'refund', r.id, `${status} ${r.type} ${r.model}`)
      if (r.free_trial) await setFreeVideosUsed(tx, this.id, -1)
      return true
    })
    this.finished(job)
    if (!done) { await this.refreshView(r.id); return }
    const s = this.state
    if (s) {
      s.credits += refund
      if (r.free_trial) s.free_videos_used = Math.max(0, s.free_videos_used - 1)
    }
    r.status = status
    r.error_message = message
    r.content_policy_violation = policyViolation
    r.credits_refunded = refund
    r.updated_at = at
    r.completed_at = at
    this.emit(r)
  }

  /**
   * The job ended elsewhere (another node, or a callback settled it here without the live actor):
   * the read cache and SSE get the stored terminal view instead of keeping a stale one.
   */
  private async refreshView (id: string): Promise<void> {
    try {
      const row = await getJob(this.deps.sql, id)
      if (row && TERMINAL_STATUSES.has(row.status)) this.emit(row)
    } catch {}
  }

  private finished (job: JobActor): void {
    job.stop()
    // A job settled for a callback without being adopted (callback()) was never counted here.
    if (this.jobs.get(job.id) !== job) return
    this.jobs.delete(job.id)
    this.decInFlight(job.row.key_id)
  }

  /** DELETE /jobs/{id} (SPEC.md section 3): only a queued job can be cancelled. */
  cancel (jobId: string): Promise<JobView> {
    return this.mailbox.post(async () => {
      await this.load()
      let live = this.jobs.get(jobId)
      if (!live) {
        const row = await getJob(this.deps.sql, jobId)
        if (!row || row.account_id !== this.id) throw new ApiError('JOB_NOT_FOUND')
        if (row.status !== 'queued') throw new ApiError('CANNOT_CANCEL', `Job ${jobId} is ${row.status}; only queued jobs can be cancelled`, { status: row.status })
        // Queued but run by another node (multi-node lease): nothing was sent to a provider,
        // so it can be cancelled from here; the terminal-state guard keeps the other node's
        // copy from acting on it afterwards.
        live = this.adopt(row)
      }
      if (live.row.status !== 'queued' || live.submitting) {
        throw new ApiError('CANNOT_CANCEL', `Job ${jobId} is ${live.row.status}; only queued jobs can be cancelled`, { status: live.row.status })
      }
      await this.terminate(live, 'cancelled', 'Cancelled by the client; credits refunded', false)
      return viewOf(live.row)
    })
  }

  // ---- batch --------------------------------------------------------------------------------

  /**
   * POST /batch (SPEC.md 4.7): items priced and charged individually, in order; the first 402
   * stops submission and later items are SKIPPED; other errors do not stop it. With an
   * Idempotency-Key the whole answer is remembered and replayed.
   */
  async createBatch (req: ShardRequests['batch.create']['req']): Promise<BatchView> {
    const key = req.idempotencyKey
    if (key === undefined) return this.runBatch(req)
    const inFlight = this.batchIdem.get(key)
    if (inFlight) { await inFlight.catch(() => {}); return this.createBatch(req) }
    // Registered before the first await, so a concurrent duplicate waits for this one.
    const p = (async (): Promise<BatchView> => {
      const stored = await findBatch(this.deps.sql, this.id, key)
      if (stored) {
        if (stored.request_hash !== req.fingerprint) throw new ApiError('IDEMPOTENCY_CONFLICT')
        return { ...(stored.response as BatchView), replayed: true }
      }
      const view = await this.runBatch(req)
      await this.deps.commit.run(tx => insertBatch(tx, this.id, key, req.fingerprint ?? '', view))
      return view
    })()
    this.batchIdem.set(key, p)
    try { return await p } finally { this.batchIdem.delete(key) }
  }

  private async runBatch (req: ShardRequests['batch.create']['req']): Promise<BatchView> {
    const results: BatchItemView[] = []
    let estimated = 0
    let charged = 0
    let stop = false
    for (const item of req.items) {
      if (item.spec) estimated += item.spec.credits
      if (stop) {
        results.push({ index: item.index, type: item.type, status: null, error: { error: true, code: 'SKIPPED', message: 'Not submitted: an earlier item failed with INSUFFICIENT_CREDITS' } })
        continue
      }
      if (!item.spec) {
        const { status, ...error } = item.error!
        results.push({ index: item.index, type: item.type, status, error })
        continue
      }
      // With a batch Idempotency-Key each item gets its own key, derived from it (':' is not in
      // the client key alphabet, so it never collides with one). The whole answer is stored only
      // once the batch ends; if the shard dies mid-batch, the client's retry re-runs it and the
      // items already created replay instead of being charged a second time.
      const itemKey = req.idempotencyKey !== undefined ? `batch:${req.idempotencyKey}:${item.index}` : undefined
      try {
        const { created } = await this.createJob({
          accountId: req.accountId, keyId: req.keyId, maxConcurrent: req.maxConcurrent, spec: item.spec,
          idempotencyKey: itemKey, fingerprint: itemKey !== undefined ? `${req.fingerprint ?? ''}:${item.index}` : undefined,
        })
        delete created.replayed // reported as the creation it was
        charged += created.credits_charged
        results.push({ index: item.index, type: item.type, status: 201, job: created })
      } catch (err) {
        const e = err instanceof ApiError ? err : new ApiError('INTERNAL_ERROR')
        results.push({ index: item.index, type: item.type, status: e.status, error: e.toJSON() as BatchItemView['error'] })
        if (e.code === 'INSUFFICIENT_CREDITS') stop = true
        // A 504 created and charged its job (details.job_id): the totals must say so.
        if (e.code === 'GATEWAY_TIMEOUT') charged += item.spec.credits
      }
    }
    const s = await this.get()
    return { results, estimated_credits: estimated, credits_charged: charged, remaining_credits: s.credits }
  }
}

/** The job's own webhook (webhook_url + webhook_secret on the request), if any. */
function webhookOf (r: JobRow): { url: string | null; secret: string | null } {
  const q = r.request as { webhook_url?: string | null; webhook_secret?: string | null }
  return { url: q.webhook_url ?? null, secret: q.webhook_secret ?? null }
}

function expectedMs (row: JobRow, route: Route, simSpeed: number): number {
  if (!route.provider.simulated) return row.estimated_seconds * 1000
  return row.model === 'voiceover' ? 1 : row.estimated_seconds * 1000 / simSpeed
}

/** The stored provider model string (SPEC.md 2.3 `model`), distinct from the API id. */
function providerModel (r: JobRow): string {
  return `${r.provider}/${r.model}`
}

export function createdOf (row: JobRow, remaining: number): CreatedJobView {
  return {
    id: row.id,
    status: row.status,
    model: row.model,
    credits_charged: row.credits_charged,
    remaining_credits: remaining,
    estimated_seconds: row.estimated_seconds,
  }
}
