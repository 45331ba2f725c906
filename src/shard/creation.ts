import { dbUnavailable, isDbUnavailable } from '../db/connect.js'
import { ApiError } from '../errors.js'
import type { Sql } from '../db/connect.js'
import { getJob, LEASE_MS, type IdemRow } from '../db/jobs.js'
import type { RouteRecord, UpstreamEvent } from '../db/upstream.js'
import { ChargeRefused } from '../db/ledger.js'
import { TERMINAL, type JobRow } from '../jobs/view.js'
import type { CreatedJobView, JobCaller, JobSpec } from '../domain.js'
import type { Providers, Route } from '../providers/registry.js'
import { unsupportedOption } from '../providers/capabilities.js'
import type { ProviderJob, UpstreamHandle } from '../providers/provider.js'
import { judgeSubmission, nextOpenRoute, verdictEvent } from '../providers/failover.js'
import type { ResultRules } from '../providers/results.js'
import { LOOKUP_MARGIN_MS, type UpstreamJobRow } from './job-actor.js'
import { deadlineOf, findLost, submitOn } from './upstream-jobs.js'
import type { Storage } from '../storage/storage.js'
import type { AccountActor } from './account-actor.js'
import { refusedCharge } from './decide.js'
import type { Charged, GroupCommit } from './group-commit.js'
import type { RedisInFlight } from './inflight.js'
import type { ShardEvent } from './protocol.js'
import type { TurnReads } from './turn-reads.js'
import type { WaitingJobs } from './waiting.js'
import { observeProvider } from '../worker-stats.js'

export interface ActorDeps {
  sql: Sql
  commit: GroupCommit
  providers: Providers
  storage: Storage
  simSpeed: number
  submitTimeoutMs: number
  /** Where provider callbacks arrive (PUBLIC_BASE_URL). */
  publicBaseUrl: string
  /** Result downloads. */
  resultRules: ResultRules
  /** Content-policy hits before the account is suspended. */
  violationThreshold: number
  /** This node's id: new jobs are leased to it (docs/architecture.md "Several nodes"). */
  nodeId: string
  /** REDIS_URL is set: other nodes may change this account too. */
  multiNode: boolean
  /** Per-key in-flight slots shared by every node (REDIS_URL set), else null. */
  inflight: RedisInFlight | null
  /**
   * Jobs whose progress changed in memory since it was last written, with the time of the
   * first unwritten change (flushed by the shard once that is a flush interval old).
   */
  progress: Map<string, { row: JobRow; since: number }>
  /**
   * The shard's waiting upstream jobs (docs/architecture.md "Waiting jobs"); absent: every job
   * keeps its own timer (tests that build one actor).
   */
  waiting?: WaitingJobs
  /** Rows of waiting jobs whose callback came, read in batches; absent: one read each. */
  rows?: TurnReads<JobRow>
  /** The jobs Idempotency-Keys name (idemPair), read in batches; absent: one read each. */
  idem?: TurnReads<IdemRow>
  emit: (ev: ShardEvent) => void
  log: (level: 'info' | 'warn' | 'error', msg: string, extra?: Record<string, unknown>) => void
}

/** A creation the mailbox admitted: its job id, whether it is the free video, and the hold. */
export interface Creation { id: string; trial: boolean; spec: JobSpec }

export function createdOf (row: JobRow, remaining: number): CreatedJobView {
  return {
    id: row.id, status: row.status, model: row.model, credits_charged: row.credits_charged, remaining_credits: remaining,
    estimated_seconds: row.estimated_seconds
  }
}

/** Waits before each read of a creation whose commit outcome is unknown (the last one repeats). */
const RECORDED_LOOKS_MS = [1000, 2000, 5000, 10_000, 30_000]
/** Reads stop after this long (the database still unreachable). */
const RECORDED_LOOK_FOR_MS = 10 * 60_000

/**
 * The database went away while a creation committed, so the job may be recorded (COMMIT
 * landed) or not. Once a read answers: a recorded job is handed to `recorded` (the shard
 * adopts and runs it, as it does a job claimed at start: nothing else would, since this node
 * keeps its lease); a job that is not is handed to `absent` (its upstream job, which would run
 * unpaid, is cancelled). While reads fail it looks again (after 1, 2, 5, 10 s, then every
 * 30 s); after RECORDED_LOOK_FOR_MS it stops and says so (an upstream job is then left to run:
 * it costs us, never the client, who was charged only if the row exists, and a restart of the
 * node resumes a recorded job).
 */
export function settleUnknownCreation<R> (
  read: () => Promise<R | undefined>, recorded: (row: R) => void, absent: () => void, log: ActorDeps['log'],
  looks: readonly number[] = RECORDED_LOOKS_MS, lookForMs = RECORDED_LOOK_FOR_MS
): Promise<'recorded' | 'absent' | 'unknown'> {
  const started = Date.now()
  let n = 0
  return new Promise((resolve) => {
    const look = (): void => {
      read().then((row) => {
        if (row === undefined) { absent(); resolve('absent') } else { recorded(row); resolve('recorded') }
      }, () => {
        if (Date.now() - started >= lookForMs) {
          log('warn', 'creation outcome still unknown after the look window; left as it is')
          resolve('unknown')
          return
        }
        setTimeout(look, looks[Math.min(n++, looks.length - 1)])
      })
    }
    setTimeout(look, looks[n++])
  })
}

/** The 502 PROVIDER_ERROR messages a client reads: every route refused, or every breaker is open. */
export const NO_PROVIDER = 'No provider could take this job; nothing was charged'
export const NO_PROVIDER_NOW = 'No provider can take this job right now; nothing was charged, try again later'

/** job.create as the actor sees it: the order rebuilt into a full spec on arrival. */
export type CreateReq = JobCaller & { spec: JobSpec; idempotencyKey?: string; fingerprint?: string }

/**
 * After the decision (docs/architecture.md "Creating a job"): ask the provider, then the charge, job row and ledger
 * entry commit together before the answer leaves (docs/decisions.md "Submission order").
 * Routes in order: an open breaker or a refusal tries the next route; a
 * route without room makes the job `queued` on it (charged, submitted when room frees).
 * The 201's remaining_credits is the balance the charge RETURNed.
 */
export async function submitAndCommit (a: AccountActor, req: CreateReq, d: { id: string; trial: boolean }): Promise<CreatedJobView> {
  // A callback that comes before the job is adopted waits for it (LiveJobs.creatingJob).
  a.live.creatingJob(d.id)
  try { return await submitAndAdopt(a, req, d) } finally { a.live.createdJob(d.id) }
}

async function submitAndAdopt (a: AccountActor, req: CreateReq, d: { id: string; trial: boolean }): Promise<CreatedJobView> {
  const spec = req.spec
  const c: Creation = { id: d.id, trial: d.trial, spec }
  const deps = a.deps
  const all = deps.providers.routesFor(spec.model)
  // Capability-aware routing (docs/providers.md "Capabilities"): only routes that serve every
  // option value this request carries, decided before anything is charged or sent.
  const routes = all.filter(r => r.unserved(spec.request, spec.prompt).length === 0)
  if (routes.length === 0) {
    a.settled({ id: d.id, trial: d.trial, spec }, req.keyId, null, false)
    throw unsupportedOption(spec.model, all, spec.request, spec.prompt)
  }
  const id = d.id
  const now = new Date()
  const pj: ProviderJob = { id, type: spec.type, model: spec.model, text: spec.directiveText, estimatedSeconds: spec.estimated_seconds, request: spec.request }
  const row: UpstreamJobRow = {
    id, account_id: a.id, key_id: req.keyId, type: spec.type, model: spec.model, status: 'submitted', prompt: spec.prompt, request: spec.request,
    progress: 0, credits_charged: spec.credits, credits_refunded: 0, estimated_seconds: spec.estimated_seconds, result_url: null, error_message: null,
    content_policy_violation: false, provider: routes[0].provider.name, provider_job_id: null, idempotency_key: req.idempotencyKey ?? null,
    request_hash: req.fingerprint ?? null, source_job_id: spec.source_job_id ?? null, free_trial: d.trial,
    deadline_at: deadlineOf(routes[0], spec.estimated_seconds, deps.simSpeed, now.getTime()), created_at: now, updated_at: now, completed_at: null,
    owner: deps.nodeId, lease_until: new Date(now.getTime() + LEASE_MS),
  }

  let submission: Promise<UpstreamHandle> | null = null
  let timedOut = false
  /** A submission without a definitive answer that could not be looked up yet: the job waits on it. */
  let lost = false
  /** Upstream jobs found beyond the first for a lost submission: duplicates, cancelled. */
  let duplicates: UpstreamHandle[] = []
  let sentAt = 0
  let handle: UpstreamHandle | null = null
  let route: Route | null = null
  let holds = false
  const events: UpstreamEvent[] = []
  let lastError: unknown = null
  let retryAfterMs = 0
  // Failover route by route (src/providers/failover.ts): an open breaker or a refusal moves on.
  for (let i = nextOpenRoute(routes, 0); i >= 0; i = nextOpenRoute(routes, i + 1)) {
    const r = routes[i]
    route = r
    row.provider = r.provider.name
    row.deadline_at = deadlineOf(r, spec.estimated_seconds, deps.simSpeed, now.getTime())
    if (!(await r.take(pj, id))) { row.status = 'queued'; break }
    holds = true
    const submitted = performance.now()
    sentAt = Date.now()
    submission = submitOn(r, pj, a.id, spec.prompt, deps.publicBaseUrl)
    let timer: NodeJS.Timeout | undefined
    const answer = await Promise.race([
      submission.then(handle => ({ ok: true as const, handle }), error => ({ ok: false as const, error })),
      new Promise<null>(resolve => { timer = setTimeout(() => resolve(null), deps.submitTimeoutMs) }),
    ])
    clearTimeout(timer)
    observeProvider(r.provider.name, (performance.now() - submitted) / 1000, answer !== null && answer.ok) // metrics
    if (answer === null) { timedOut = true; break }
    const v = judgeSubmission(r, answer)
    if (v.kind === 'taken') {
      handle = v.handle
      row.provider_job_id = handle.id
      row.upstream = handle
      row.route = r.key
      row.submitted_at = new Date()
      if (r.recordsHistory) events.push({ job_id: id, source: 'submit', route: r.key, state: 'submitted', detail: { upstream_id: handle.id } })
      break
    }
    if (r.recordsHistory) events.push(verdictEvent(v, id, r))
    if (v.kind === 'unanswered') {
      const p = r.provider
      if (p.lookup === 'list') {
        let found: UpstreamHandle[] | null = null
        try {
          const left = Math.max(1000, Math.round(deps.submitTimeoutMs - (performance.now() - submitted)))
          const since = new Date(sentAt - LOOKUP_MARGIN_MS)
          found = await findLost(deps.sql, r, pj, a.id, spec.prompt, deps.publicBaseUrl, since, undefined, AbortSignal.timeout(left))
        } catch (err) {
          events.push({ job_id: id, source: 'submit', route: r.key, state: 'lookup_failed', detail: { error: String((err as Error)?.message ?? err) } })
        }
        if (found !== null && found.length > 0) {
          // It was created: it is this job's upstream job (charged once, as an accepted one).
          handle = found[0]
          duplicates = found.slice(1)
          row.provider_job_id = handle.id
          row.upstream = handle
          row.route = r.key
          row.submitted_at = new Date()
          submission = null
          events.push({ job_id: id, source: 'submit', route: r.key, state: 'found', detail: { upstream_id: handle.id, via: 'lookup' } })
          break
        }
        if (found === null) { lost = true; submission = null; break } // cannot tell: the job waits on this route
        events.push({ job_id: id, source: 'submit', route: r.key, state: 'not_found', detail: null })
      } else if (p.lookup === 'callback' && p.takesCallbacks) {
        // No job list (Kie): the job waits for the callback our job id travels in.
        lost = true
        submission = null
        break
      }
      // Not created (looked, not found), or nothing can find it: the next route, never this one.
    }
    r.release(id)
    holds = false
    submission = null
    if (v.kind === 'rate_limited') {
      // The provider is at capacity for us: like a full route, the job is charged and
      // `queued`, and submitted again after Retry-After.
      row.status = 'queued'
      retryAfterMs = v.retryAfterMs ?? 1000
      break
    }
    // Refused (definitive) or unavailable (indefinite): nothing is charged for this route; the
    // next route is tried. An indefinite error may leave an orphan upstream job: it costs us,
    // never the client (docs/decisions.md).
    lastError = v.error
    route = null
  }
  if (route === null) {
    a.settled(c, req.keyId, null, false)
    // The client's message is neutral (docs/providers.md "Routing"): no
    // provider name, no upstream text. No job row exists to keep the detail, so the operator
    // gets it in the log, keyed by the job id the job would have had.
    if (lastError !== null) a.log('no route took the job', { job: id, model: spec.model, last: String((lastError as Error)?.message ?? lastError), refusals: events.map(e => ({ route: e.route, state: e.state, detail: e.detail })) })
    throw new ApiError('PROVIDER_ERROR', lastError === null ? NO_PROVIDER_NOW : NO_PROVIDER)
  }
  const on: Route = route
  row.route = on.key

  // voiceover completes synchronously (docs/api.md "Audio"): its 201 already carries the result.
  if (handle !== null && spec.model === 'voiceover' && on.provider.simulated) {
    try {
      const st = await on.provider.status(handle, pj)
      if (st.state === 'succeeded' && st.outputs.length) {
        const at = new Date()
        Object.assign(row, { status: 'completed', progress: 100, result_url: st.outputs[0], updated_at: at, completed_at: at })
      }
    } catch (err) { a.log('voiceover status failed; completing asynchronously', { job: id, err: String(err) }) }
  }

  // A configured route also records its route, handle and history in the creation's statement
  // (the implicit simulated route needs none of it: its handle is its id).
  const record: RouteRecord | null = on.recordsHistory
    ? { route: on.key, upstream: handle, submitted_at: handle !== null ? row.submitted_at ?? now : null, events }
    : null
  let committed: Charged
  try {
    // The row itself: nothing changes it until the commit has settled (it is adopted after).
    committed = await deps.commit.create(row, record)
  } catch (err) {
    a.settled(c, req.keyId, null, false)
    if (holds) on.release(id)
    const cancel = (): void => {
      if (handle) on.provider.cancel(handle).catch(() => {})
      else if (submission) submission.then(x => on.provider.cancel(x), () => {}).catch(() => {})
    }
    // Not recorded for certain: the upstream job would run unpaid. With the outcome unknown, a
    // read decides: a recorded job is run here, an absent one's upstream job cancelled.
    if (isDbUnavailable(err)) {
      // The actor stays in the shard (not evicted) until the read decides.
      a.busy++
      const run = (r: JobRow): void => { if (!TERMINAL.has(r.status)) a.live.resume(r) }
      void settleUnknownCreation(() => getJob(deps.sql, id), run, cancel, (level, msg) => deps.log(level, msg, { job: id }))
        .finally(() => { a.busy-- })
    } else cancel()
    if (err instanceof ChargeRefused) {
      // Another node spent the balance or used the free video first: answer from the row.
      throw refusedCharge(await a.reload(), d.trial, spec)
    }
    if (isDbUnavailable(err)) {
      // The database went away mid-commit, so the outcome is unknown (COMMIT may
      // have landed). Reload balance and counts at next use; a retry with the same
      // Idempotency-Key finds the job if it was committed.
      a.stale = true
      throw dbUnavailable('The database is unreachable; the job may not have been recorded. Retry with the same Idempotency-Key')
    }
    deps.log('error', 'job commit failed', { account: a.id, err: String(err) })
    throw new ApiError('INTERNAL_ERROR', 'The job could not be recorded; nothing was charged. Safe to retry with the same Idempotency-Key')
  }
  const running = row.status !== 'completed'
  a.settled(c, req.keyId, committed, running)
  a.live.emit(row)
  if (!running) {
    if (holds) on.release(id)
  } else {
    const job = a.live.adopt(row, pj, all.indexOf(on), handle)
    job.announced = true // its full view was emitted just above
    if (holds) job.took(on)
    if (retryAfterMs > 0) job.retryAfter(retryAfterMs)
    else if (row.status === 'queued' && on.provider.accepts(pj)) job.waitFor(on)
    for (const x of duplicates) job.candidate(on.provider.name, x.id)
    if (timedOut && submission) {
      job.awaitSubmission(submission, sentAt)
      throw new ApiError('GATEWAY_TIMEOUT', `The provider did not answer within ${deps.submitTimeoutMs} ms; the job ${id} was created and charged and is still running. Poll GET /v1/jobs/${id} instead of resubmitting`, { details: { job_id: id } })
    }
    if (lost) {
      job.schedule(0)
      throw new ApiError('GATEWAY_TIMEOUT', `The provider did not confirm the submission; the job ${id} was created and charged and is still running. Poll GET /v1/jobs/${id} instead of resubmitting`, { details: { job_id: id } })
    }
    job.schedule(row.status === 'queued' ? 0 : undefined)
  }
  const created = createdOf(row, committed.credits)
  if (row.status === 'completed') created.result_url = row.result_url
  return created
}
