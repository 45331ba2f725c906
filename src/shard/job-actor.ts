import type { JobRow, JobStatus } from '../jobs/view.js'
import type { UpstreamEvent } from '../db/upstream.js'
import { UpstreamUnavailable, type ProviderJob, type UpstreamHandle, type UpstreamState } from '../providers/provider.js'
import { judgeSubmission, nextOpenRoute, verdictEvent } from '../providers/failover.js'
import type { Route } from '../providers/registry.js'
import { ResultRejected, storeResult, type ResultRules } from '../providers/results.js'
import { thumbnailFor } from '../providers/library-media.js'
import type { Storage } from '../storage/storage.js'

/** A stored job row with the upstream columns of sql/0008_upstream.sql. */
export type UpstreamJobRow = JobRow & { route?: string | null; upstream?: UpstreamHandle | null; submitted_at?: Date | null }

/** What a JobActor needs from its AccountActor (which owns balance and commits). */
export interface JobHost {
  /** Persist a non-terminal change (status, progress) plus upstream history. */
  progress (job: JobActor, status: JobStatus, progress: number, events?: UpstreamEvent[]): Promise<void>
  /** Persist a submission: route, handle, deadline counted from now (status `submitted`). */
  submitted (job: JobActor, route: Route, handle: UpstreamHandle, events: UpstreamEvent[]): Promise<void>
  /** Persist the terminal state; failures refund in the same transaction. */
  complete (job: JobActor, resultUrl: string, events?: UpstreamEvent[], thumbnailUrl?: string | null): Promise<void>
  fail (job: JobActor, message: string, policyViolation: boolean, events?: UpstreamEvent[]): Promise<void>
  /** Submits on `route` with the route's mapped input and our callback URL. */
  submitWith (job: JobActor, route: Route): Promise<UpstreamHandle>
  /**
   * A submission on `route` got no definitive answer: persist status `submitted` on that route
   * without a handle (a resumed job then looks for it first) and the history.
   */
  unanswered (job: JobActor, route: Route, events: UpstreamEvent[]): Promise<void>
  /**
   * The upstream jobs on `route` that are this job's lost submission (or `candidate`, an id a
   * callback named), oldest first, without those another job already holds (upstream-jobs.ts).
   */
  find (job: JobActor, route: Route, since: Date, candidate?: string): Promise<UpstreamHandle[]>
  /**
   * Parks the job until `delayMs` from now (docs/architecture.md "Waiting jobs"): it leaves
   * memory but for a compact record, and runs again when due or when its callback comes.
   * False: not parked (the job keeps its own timer).
   */
  park? (job: JobActor, delayMs: number): boolean
  /** A job woken by its due time finished its first step (room for the next due one). */
  settled? (job: JobActor): void
  /** History only (refused routes, failed downloads). */
  record (events: UpstreamEvent[]): Promise<void>
  /** The deadline of a job a provider got now (docs/architecture.md "Providers and media": counted from submission). */
  deadlineFrom (job: JobActor, route: Route, at: number): Date
  storage: Storage
  resultRules: ResultRules
  log: (msg: string, extra?: Record<string, unknown>) => void
}

/** The upstream history of a poll that records none (shared, never written to). */
const NO_EVENTS: UpstreamEvent[] = Object.freeze([]) as unknown as UpstreamEvent[]

/**
 * Poll cadence of a provider that sends no callbacks (the simulated provider, a real one whose
 * callbacks cannot be verified): a tenth of the expected run time, between 20 ms and 5 s;
 * errors back off to 60 s.
 */
const MIN_POLL_MS = 20
const MAX_POLL_MS = 5000
const MAX_BACKOFF_MS = 60_000
/** Poll wake-ups are aligned on this grid (schedule()). */
const POLL_GRID_MS = 10
/** A queued job rechecks its routes at least this often (capacity is also pushed by wake-ups). */
const QUEUED_RECHECK_MS = 5000
/**
 * Reconciliation of a job whose provider calls back (docs/providers.md "Polling and lost
 * callbacks"): the first poll at the expected end (submission + catalogue estimate), then
 * doubling gaps from a quarter of the estimate (at least RECONCILE_MIN_MS) up to
 * RECONCILE_CAP_MS. A lost callback is found at most max(estimate, RECONCILE_CAP_MS) after the
 * job ended upstream (longer only when the provider's request budget cannot fit every waiting
 * job's poll: then N / requests_per_second), and never after the deadline (a last poll precedes
 * the deadline's cancel).
 */
export const RECONCILE_MIN_MS = 5000
export const RECONCILE_CAP_MS = 600_000
/** A job whose next step is at least this far away parks (JobHost.park) instead of keeping a timer. */
export const PARK_MIN_MS = 5000
/**
 * A job submitted less than this long ago keeps its live object until then, and parks only if it
 * has still nothing to do: a callback that comes this early (a quick model, a short queue) finds
 * it without reading its row back (docs/architecture.md "Waiting jobs"). Costs at most
 * creations/s x PARK_GRACE_MS live jobs.
 */
export const PARK_GRACE_MS = 2000
/** Budget of the best-effort upstream cancel before a deadline refund. */
const CANCEL_BUDGET_MS = 10_000
/** A lost submission is looked for from this long before it was sent (clocks differ). */
export const LOOKUP_MARGIN_MS = 120_000
/** The client's message when the provider refused the job's input after taking it (fal 422). */
export const INPUT_REFUSED = 'The provider could not run this job with these inputs; credits refunded'
/** The client's message for any other failure a real provider reported (its text is in the history). */
export const PROVIDER_FAILED = 'The provider failed the job; credits refunded'
export const PROVIDER_POLICY = 'The provider refused this job under its content policy; credits refunded'

/**
 * One job's state machine (docs/api.md "Jobs"): queued -> submitted -> processing ->
 * completed | failed | cancelled. It submits on its routes in order (failover on a definitive
 * refusal or an open breaker), polls with backoff, takes callback states (callbacks
 * first, polling reconciles), stores results in our storage, and asks its host (the
 * AccountActor) to persist each change. One timer; ticks never overlap.
 */
export class JobActor {
  timer: NodeJS.Timeout | null = null
  /** A step due now (a callback's state, an answer that came) runs in the next check phase, not a timer's 1 ms later. */
  private soon: NodeJS.Immediate | null = null
  /** Set while a submission is outstanding (a queued job's submit, or one that timed out at creation). */
  submitting: Promise<unknown> | null = null
  /** The provider's answer to `submitting`, noted when it arrives and persisted by tick(). */
  private answer: { handle: UpstreamHandle } | { error: unknown } | null = null
  private errors = 0
  private readonly basePollMs: number
  terminal = false
  /** Index into `routes` of the route in use (or to try next). */
  private routeIndex: number
  handle: UpstreamHandle | null
  /** True while this job holds a capacity slot on `route`. */
  private holdsSlot = false
  /** Verified callback states waiting for the next tick (newest last). */
  private pushed: UpstreamState[] = []
  private running = false
  /** A schedule() asked for during a tick, armed when it ends. */
  private next: number | undefined
  private lastState: string | null = null
  /**
   * The front ends were sent this job's full view (creation does; a resumed job's first change
   * does): later non-terminal changes cross as compact `job.progress` events (LiveJobs.emitChange).
   */
  announced = false
  /** Run one step and stop (a job settled for a callback on a node that does not run it). */
  oneShot = false
  /** Not before this time (upstream 429 Retry-After). */
  private notBefore = 0
  /** When a young job's wait ends (schedule()'s grace before parking). */
  private parkFor = 0
  /** When the outstanding submission was sent (the lookup window of a lost one starts there). */
  private sentAt = Date.now()
  /**
   * A submission on the current route that got no definitive answer (timeout, 5xx, connection
   * lost): nothing is sent again on that route until it has been looked for (docs/providers.md
   * "No duplicate upstream jobs"). `candidates`: upstream ids callbacks named for this job.
   */
  lost: { since: Date; candidates: string[] } | null = null
  /** Upstream ids callbacks named for this job while it runs on another one: checked, then cancelled. */
  private readonly orphans: Array<{ provider: string; id: string }> = []
  /** Reconciliation polls made since submission (pollDelay). */
  polls = 0
  /** Woken by its due time from the waiting index (JobHost.settled once its step ran). */
  woken = false
  /** Left memory for the waiting index (JobHost.park): this object is inert. */
  parked = false

  constructor (
    readonly row: UpstreamJobRow, readonly pj: ProviderJob, readonly routes: Route[], private readonly host: JobHost, readonly expectedMs: number,
    routeIndex = 0, handle: UpstreamHandle | null = null
  ) {
    this.basePollMs = Math.min(MAX_POLL_MS, Math.max(MIN_POLL_MS, Math.round(expectedMs / 10)))
    this.routeIndex = routeIndex
    this.handle = handle
    // `submitted` without a handle on a real route: a submission was sent and its answer never
    // came (creation timed out, the connection was lost, or the process stopped meanwhile).
    const r = this.route
    if (handle === null && row.status === 'submitted' && r && r.recordsHistory && !r.provider.simulated) {
      const from = row.submitted_at ?? row.updated_at ?? row.created_at
      this.lost = { since: new Date(from.getTime() - LOOKUP_MARGIN_MS), candidates: [] }
    }
  }

  get id (): string { return this.row.id }
  get route (): Route { return this.routes[Math.min(this.routeIndex, this.routes.length - 1)] }

  /** The last upstream state in the job's history (kept while the job waits, so it is not written again). */
  get label (): string | null { return this.lastState }

  /** A job back from the waiting index: its reconciliation count and last recorded state. */
  restore (polls: number, label: string | null): void {
    this.polls = polls
    this.lastState = label
  }

  /**
   * True when the provider calls this job back (our callback URL went with the submission):
   * polling only reconciles (pollDelay).
   */
  get reconciles (): boolean {
    const p = this.route.provider
    return !p.simulated && p.takesCallbacks === true && p.verifyCallback !== undefined
  }

  /** The wait before the next status poll (docs/providers.md "Polling and lost callbacks"). */
  pollDelay (): number {
    if (this.handle === null || !this.reconciles) return this.basePollMs
    const expected = this.route.provider.reconcileAfterMs ?? this.expectedMs
    if (this.polls === 0) {
      const from = (this.row.submitted_at ?? this.row.created_at).getTime()
      return Math.max(RECONCILE_MIN_MS, from + Math.max(expected, RECONCILE_MIN_MS) - Date.now())
    }
    return Math.min(RECONCILE_CAP_MS, Math.max(RECONCILE_MIN_MS, expected / 4) * 2 ** (this.polls - 1))
  }

  /** Nothing is under way but the wait for the next poll or the callback: the job may leave memory. */
  private parkable (): boolean {
    return !this.oneShot && this.handle !== null && this.submitting === null && this.lost === null && this.answer === null &&
      this.orphans.length === 0 && this.pushed.length === 0 && !this.route.provider.simulated
  }

  /** The creation path submitted on `route` and holds its slot (or its answer is outstanding). */
  took (route: Route): void {
    this.routeIndex = Math.max(0, this.routes.indexOf(route))
    this.holdsSlot = true
  }

  schedule (delayMs = this.pollDelay()): void {
    if (this.terminal) return
    // During a tick the request is kept and armed when the tick ends: ticks never overlap.
    if (this.running) { this.next = this.next === undefined ? delayMs : Math.min(this.next, delayMs); return }
    if (this.timer) { clearTimeout(this.timer); this.timer = null }
    if (this.soon) { clearImmediate(this.soon); this.soon = null }
    // A job a provider holds wakes up at its deadline, not only at the next poll.
    if (this.handle !== null || this.submitting || this.lost) {
      const until = this.row.deadline_at.getTime() - Date.now()
      if (until >= 0) delayMs = Math.min(delayMs, until + 1)
    }
    const now = Date.now()
    let d = Math.max(delayMs, this.notBefore - now, 0)
    // Polls are aligned on a POLL_GRID_MS grid: the jobs of a shard due within the same few ms
    // wake in one timers phase, so their events cross in one message and their commits join
    // one group commit. Short waits (wake-ups, retries now) are not delayed.
    if (d >= MIN_POLL_MS) d = Math.ceil((now + d) / POLL_GRID_MS) * POLL_GRID_MS - now
    // A long wait is spent as a record of the shard's waiting index, not as this object.
    if (d >= PARK_MIN_MS && this.parkable() && this.host.park) {
      const grace = PARK_GRACE_MS - (now - (this.row.submitted_at ?? this.row.created_at).getTime())
      if (grace > 0) {
        // Still young: schedule() again at the end of its grace, which then parks it.
        this.parkFor = now + d
        this.timer = setTimeout(JobActor.graceOver, grace, this)
        return
      }
      if (this.host.park(this, d)) return
    }
    if (d === 0) this.soon = setImmediate(this.fire)
    else this.timer = setTimeout(this.fire, d)
  }

  /** A young job's grace ended: its wait goes on, parked if it may (no closure per job). */
  private static graceOver (job: JobActor): void {
    job.timer = null
    job.schedule(Math.max(0, job.parkFor - Date.now()))
  }

  /** The timer's or the immediate's callback (one function per job, not one per poll). */
  private readonly fire = (): void => { this.timer = null; this.soon = null; this.run() }

  private run (): void {
    if (this.running || this.terminal) return
    this.running = true
    this.next = undefined
    this.tick().then(this.ticked, this.tickFailed)
  }

  /** A job woken by its due time gives its place back once its step ran. */
  private settleWake (): void {
    if (!this.woken) return
    this.woken = false
    this.host.settled?.(this)
  }

  private readonly ticked = (): void => {
    this.running = false
    this.settleWake()
    if (this.oneShot) { this.stop(); return }
    const d = this.next
    this.next = undefined
    if (d !== undefined) this.schedule(d)
  }

  private readonly tickFailed = (err: unknown): void => {
    this.running = false
    this.settleWake()
    this.next = undefined
    if (this.oneShot) { this.stop(); return }
    // A write that failed (a database hiccup, a failed group commit) must not strand the job.
    this.errors++
    this.host.log('job tick failed; retrying', { job: this.id, err: String(err), errors: this.errors })
    this.schedule(this.backoffMs())
  }

  private backoffMs (): number {
    // A reconciled job backs off from RECONCILE_MIN_MS: its polls are rare by design.
    if (this.reconciles && this.handle !== null) return Math.min(RECONCILE_CAP_MS, RECONCILE_MIN_MS * 2 ** Math.max(0, this.errors - 1))
    return Math.min(MAX_BACKOFF_MS, this.basePollMs * 2 ** this.errors)
  }

  /** Stops the machine and frees its route slot or queue place (terminal, or the job moved). */
  stop (): void {
    this.settleWake()
    this.terminal = true
    if (this.timer) { clearTimeout(this.timer); this.timer = null }
    if (this.soon) { clearImmediate(this.soon); this.soon = null }
    for (const r of this.routes) r.unwait(this.id)
    if (this.holdsSlot) { this.holdsSlot = false; this.route.release(this.id) }
  }

  /**
   * A creation found `route` full: the job takes its place in the route's queue at once, so the
   * queue (GET /v1/health `queued`, first come first served) holds it before the 201 is sent,
   * not from its first tick on.
   */
  waitFor (route: Route): void {
    this.routeIndex = Math.max(0, this.routes.indexOf(route))
    route.wait(this.id, () => this.schedule(0))
  }

  /** Nothing is sent to the provider before `ms` from now (upstream 429 Retry-After). */
  retryAfter (ms: number): void { this.notBefore = Math.max(this.notBefore, Date.now() + ms) }

  /** A verified callback: its state if trustworthy, else a poll now. */
  poke (state?: UpstreamState): void {
    if (this.terminal) return
    if (state) this.pushed.push(state)
    this.schedule(0)
  }

  /**
   * A verified callback named `id` on `provider` for this job, but no job holds that id (the
   * answer to its submission was lost, or a duplicate exists): checked against the provider,
   * then adopted (a lost submission on that provider) or cancelled (the job runs elsewhere).
   */
  candidate (provider: string, id: string): void {
    if (this.terminal || this.handle?.id === id) return
    if (this.lost && this.route.provider.name === provider) {
      if (!this.lost.candidates.includes(id)) this.lost.candidates.push(id)
    } else if (!this.orphans.some(o => o.id === id)) {
      this.orphans.push({ provider, id })
    }
    this.schedule(0)
  }

  /** Adopts the answer of a submission that timed out at creation (or a queued job's submit). */
  awaitSubmission (p: Promise<UpstreamHandle>, sentAt = Date.now()): void {
    this.submitting = p
    this.sentAt = sentAt
    this.answer = null
    this.schedule(this.basePollMs)
    // Noted here, persisted by tick(): a failed write is retried like any other.
    p.then((handle) => {
      if (this.submitting !== p) return
      this.answer = { handle }
      this.schedule(0)
    }, (error: unknown) => {
      if (this.submitting !== p) return
      this.answer = { error }
      this.schedule(0)
    })
  }

  private ev (source: UpstreamEvent['source'], state: string, detail?: Record<string, unknown>): UpstreamEvent {
    return { job_id: this.id, source, route: this.route.key, state, detail: detail ?? null, at: new Date() }
  }

  private async tick (): Promise<void> {
    if (this.terminal) return
    // The deadline runs only while a provider holds the job or its submission is outstanding
    // (docs/architecture.md "Providers and media"): a job queued for capacity waits as long as it takes.
    if ((this.submitting || this.handle !== null || this.lost) && Date.now() >= this.row.deadline_at.getTime()) return this.deadline()
    if (this.submitting) return this.settleSubmission()
    if (this.orphans.length > 0) return this.cancelOrphan(this.orphans.shift()!)
    if (this.lost) return this.lookFor(this.lost)
    if (this.handle === null) return this.trySubmit()
    let st: UpstreamState
    let source: 'poll' | 'callback' = 'poll'
    const pushed = this.pushed.shift()
    if (pushed) {
      st = pushed
      source = 'callback'
    } else {
      try {
        // The in-process simulated provider needs no timeout (one timer less per poll).
        const provider = this.route.provider
        st = await provider.status(this.handle, this.pj, provider.simulated ? undefined : AbortSignal.timeout(30_000))
        this.errors = 0
        this.polls++
      } catch (err) {
        // Timeouts, 5xx, 429 on status keep the job running.
        this.errors++
        const ra = err instanceof UpstreamUnavailable ? err.retryAfterMs : null
        if (ra) this.notBefore = Date.now() + ra
        this.host.log('provider status failed', { job: this.id, err: String(err), errors: this.errors })
        this.schedule(Math.max(ra ?? 0, this.backoffMs()))
        return
      }
    }
    if (this.terminal) return
    await this.apply(st, source)
  }

  /** One upstream state, from a poll or a verified callback: the same transition either way. */
  private async apply (st: UpstreamState, source: 'poll' | 'callback'): Promise<void> {
    // History is only built for routes that keep it (the implicit simulated route does not):
    // without it a poll allocates no label and no event list.
    const history = this.route.recordsHistory
    const label = history ? (st.state === 'running' ? `running ${st.progress ?? ''}`.trim() : st.state) : null
    const events = history && label !== this.lastState
      ? [this.ev(source, st.state, st.state === 'running' && st.progress !== undefined ? { progress: st.progress } : undefined)]
      : NO_EVENTS
    switch (st.state) {
      case 'queued':
        if (this.row.status !== 'submitted' || events.length) await this.host.progress(this, 'submitted', this.row.progress, events)
        this.lastState = label
        this.schedule()
        return
      case 'running': {
        const progress = Math.max(this.row.progress, Math.min(99, Math.max(0, Math.floor(st.progress ?? this.row.progress))))
        if (this.row.status !== 'processing' || progress !== this.row.progress || events.length) await this.host.progress(this, 'processing', progress, events)
        this.lastState = label
        this.schedule()
        return
      }
      case 'succeeded': {
        let url: string
        try {
          url = await this.store(st.outputs)
        } catch (err) {
          this.errors++
          await this.host.record([this.ev('store_failed', 'succeeded', { error: String((err as Error)?.message ?? err) })]).catch(() => {})
          this.host.log('storing the result failed', { job: this.id, err: String(err) })
          if (err instanceof ResultRejected || this.errors > 8) {
            await this.host.fail(this, `The provider's result could not be stored: ${(err as Error).message}; credits refunded`, false)
            return
          }
          this.schedule(this.backoffMs())
          return
        }
        // The library video's thumbnail (a frame; the image library has no thumbnail field):
        // best effort, a job never fails for want of one.
        let thumb: string | null = null
        if (this.row.type === 'video' || this.row.type === 'extend') {
          try { thumb = await thumbnailFor(this.host.storage, 'video', url) } catch (err) {
            this.host.log('thumbnail failed', { job: this.id, err: String((err as Error)?.message ?? err) })
          }
        }
        await this.host.complete(this, url, [...events, this.ev('stored', 'succeeded', { outputs: st.outputs.length, url, thumbnail_url: thumb })], thumb)
        return
      }
      case 'failed': {
        if (this.route.provider.simulated) {
          await this.host.fail(this, st.reason || 'The provider failed the job', st.contentPolicy, events)
          return
        }
        // A real provider's failure: the client reads a neutral message (no provider name, no
        // upstream text; docs/providers.md "Routing"), the operator the reason in the history. An
        // input refused after acceptance (fal's late 422) is the request's fault: the route's
        // breaker never sees it (polls do not count), and the message says so.
        const message = st.inputRefused ? INPUT_REFUSED : st.contentPolicy ? PROVIDER_POLICY : PROVIDER_FAILED
        const detail = { reason: st.reason, ...(st.inputRefused ? { input_refused: true } : {}) }
        const history = events.length ? events.map(e => ({ ...e, detail: { ...(e.detail ?? {}), ...detail } })) : [this.ev(source, 'failed', detail)]
        await this.host.fail(this, message, st.contentPolicy, history)
        return
      }
      case 'canceled':
        await this.host.fail(this, 'The provider cancelled the job; credits refunded', false, events)
    }
  }

  /** Our deadline: try to cancel upstream first, then fail with a refund (a definitive end). */
  private async deadline (): Promise<void> {
    let cancelled: boolean | string = 'no upstream id (the submission never answered)'
    if (this.handle !== null && !this.route.provider.simulated) {
      // A last poll first: a job that ended upstream and whose callback was lost ends as it did,
      // not as a deadline failure (docs/providers.md "Polling and lost callbacks").
      try {
        const st = await this.route.provider.status(this.handle, this.pj, AbortSignal.timeout(CANCEL_BUDGET_MS))
        if (st.state === 'succeeded' || st.state === 'failed' || st.state === 'canceled') return this.apply(st, 'poll')
      } catch {}
      if (this.terminal) return
    }
    if (this.handle !== null) {
      try {
        cancelled = await this.route.provider.cancel(this.handle, AbortSignal.timeout(CANCEL_BUDGET_MS))
      } catch (err) { cancelled = String((err as Error)?.message ?? err) }
    }
    // 'requested' (fal 202): the app may still finish and bill; its callback is recorded after
    // the refund ('late' events in the history), no money moves (refund rules unchanged).
    const state = cancelled === true ? 'canceled' : cancelled === 'requested' ? 'cancel_requested' : 'unconfirmed'
    await this.host.fail(this, 'The provider did not finish the job before its deadline; credits refunded', false,
      [this.ev('cancel', state, { answer: cancelled }), this.ev('deadline', 'failed')])
  }

  /** Routes this job's request can run on (capability routing), by route, computed once. */
  private readonly serving = new Map<Route, boolean>()

  /** True when `r` serves this job's request (src/providers/capabilities.ts). */
  private serves (r: Route): boolean {
    let ok = this.serving.get(r)
    if (ok === undefined) {
      ok = r.unserved(this.pj.request, this.row.prompt).length === 0
      this.serving.set(r, ok)
    }
    return ok
  }

  private readonly servesRoute = (r: Route): boolean => this.serves(r)

  /** The first route at or after `from` that serves this job, or -1. */
  private nextServing (from: number): number {
    for (let i = from; i < this.routes.length; i++) if (this.serves(this.routes[i])) return i
    return -1
  }

  /** A job without an upstream handle: find a route with room, in order, and submit. */
  private async trySubmit (): Promise<void> {
    if (this.nextServing(this.routeIndex) < 0) {
      // No route left can take this request (the routing file changed, or every serving route
      // refused it): a definitive end, refunded.
      await this.host.fail(this, 'No provider route can run this request any more; credits refunded', false)
      return
    }
    // Failover route by route (src/providers/failover.ts): an open breaker moves on.
    for (let i = nextOpenRoute(this.routes, this.routeIndex, this.servesRoute); i >= 0; i = nextOpenRoute(this.routes, i + 1, this.servesRoute)) {
      const r = this.routes[i]
      if (!r.provider.accepts(this.pj)) {
        // The provider has no capacity for this job at all ([sim:queue]): it waits here, out of
        // the route's queue, so it never holds up the jobs behind it.
        this.routeIndex = i
        this.schedule(QUEUED_RECHECK_MS)
        return
      }
      if (!(await r.take(this.pj, this.id))) {
        // Full: wait for room on the first route that is not broken (first come, first served).
        this.routeIndex = i
        r.wait(this.id, () => this.schedule(0))
        this.schedule(QUEUED_RECHECK_MS)
        return
      }
      // Stopped while the slot was being taken (cancelled, moved): give it back.
      if (this.terminal) { r.release(this.id); return }
      this.routeIndex = i
      this.holdsSlot = true
      // The deadline counts from submission (persisted with the handle by host.submitted).
      this.row.deadline_at = this.host.deadlineFrom(this, r, Date.now())
      this.awaitSubmission(this.host.submitWith(this, r), Date.now())
      return
    }
    // Every route's breaker is open: look again later.
    this.schedule(QUEUED_RECHECK_MS)
  }

  private async settleSubmission (): Promise<void> {
    const a = this.answer
    if (a === null) { this.schedule(this.basePollMs); return }
    const r = this.route
    const v = judgeSubmission(r, 'handle' in a ? { ok: true, handle: a.handle } : { ok: false, error: a.error })
    if (v.kind === 'taken') {
      this.lost = null
      this.lastState = 'submitted'
      await this.host.submitted(this, r, v.handle, [this.ev('submit', 'submitted', { upstream_id: v.handle.id })])
      this.handle = v.handle
      this.submitting = null
      this.answer = null
      this.errors = 0
      this.polls = 0
      this.schedule()
      return
    }
    const err = v.error
    this.submitting = null
    this.answer = null
    this.lost = null
    if (v.kind === 'unanswered') {
      // The provider may have created the job. Nothing is sent again on this route before it
      // has been looked for (lookFor); the slot stays held meanwhile, as the upstream job may be
      // using the capacity.
      this.lost = { since: new Date(this.sentAt - LOOKUP_MARGIN_MS), candidates: [] }
      this.host.log('submission unanswered; looking for it before anything is sent again', { job: this.id, err: String(err) })
      await this.host.unanswered(this, r, [verdictEvent(v, this.id, r, { sent_at: new Date(this.sentAt).toISOString() })])
      this.schedule(0)
      return
    }
    if (this.holdsSlot) { this.holdsSlot = false; r.release(this.id) }
    if (v.kind === 'refused') {
      // Definitive: this route will not run the job; the next one may (the job stays charged once).
      await this.host.record([verdictEvent(v, this.id, r)])
      const next = this.nextServing(this.routeIndex + 1)
      if (next >= 0) { this.routeIndex = next; this.schedule(0); return }
      // Neutral for the client; the refusal itself is in the upstream history (GET /v1/admin/jobs/{id}).
      await this.host.fail(this, 'No provider could take this job; credits refunded', false)
      return
    }
    // Indefinite (network, 5xx, 429): a running job has time, so the same route again later,
    // after Retry-After if given.
    this.errors++
    if (v.retryAfterMs) this.notBefore = Date.now() + v.retryAfterMs
    this.host.log('submission failed; retrying', { job: this.id, err: String(err), errors: this.errors })
    this.schedule(Math.max(v.retryAfterMs ?? 0, this.backoffMs()))
  }

  /**
   * A lost submission (docs/providers.md "No duplicate upstream jobs"): look for it where the
   * provider can tell (its job list, or a task a callback named). Found: it is the job's
   * upstream job (later matches are duplicates, cancelled). Listed and not found: it was never
   * created, the same route may be tried again. A provider without a list (Kie) is waited on
   * for its callback when callbacks are configured (until the deadline); without callbacks
   * nothing can find it, so the job moves to the next route that serves it, never this one.
   */
  private async lookFor (lost: { since: Date; candidates: string[] }): Promise<void> {
    const r = this.route
    const p = r.provider
    const candidate = lost.candidates.shift()
    if (p.find && (p.lookup === 'list' || candidate !== undefined)) {
      let found: UpstreamHandle[]
      try {
        found = await this.host.find(this, r, lost.since, candidate)
        this.errors = 0
      } catch (err) {
        // The provider cannot tell now: look again later; nothing is sent meanwhile.
        if (candidate !== undefined) lost.candidates.unshift(candidate)
        this.errors++
        const ra = err instanceof UpstreamUnavailable ? err.retryAfterMs : null
        this.host.log('lookup of a lost submission failed', { job: this.id, err: String(err), errors: this.errors })
        this.schedule(Math.max(ra ?? 0, this.backoffMs()))
        return
      }
      if (this.terminal || this.lost !== lost) return
      if (found.length > 0) {
        const [h, ...extra] = found
        this.lost = null
        this.lastState = 'submitted'
        if (!this.holdsSlot) { r.adopt(this.id); this.holdsSlot = true }
        await this.host.submitted(this, r, h, [this.ev('submit', 'found', { upstream_id: h.id, via: candidate !== undefined ? 'callback' : 'lookup' })])
        this.handle = h
        for (const x of extra) this.orphans.push({ provider: p.name, id: x.id })
        // Named by a callback: that callback is news of the job (Kie's only says "look"), so it is polled now.
        this.schedule(this.orphans.length > 0 || candidate !== undefined ? 0 : undefined)
        return
      }
      if (candidate !== undefined) {
        await this.host.record([this.ev('submit', 'not_ours', { upstream_id: candidate })])
        this.schedule(lost.candidates.length > 0 ? 0 : QUEUED_RECHECK_MS)
        return
      }
      // Listed and not there: it was never created; this route may take the job again.
      await this.host.record([this.ev('submit', 'not_found', { since: lost.since.toISOString() })])
      this.lost = null
      if (this.holdsSlot) { this.holdsSlot = false; r.release(this.id) }
      this.schedule(0)
      return
    }
    if (p.lookup === 'callback' && p.takesCallbacks) {
      // Kie lists no tasks: its callback (our job id in the URL) names the task when it ends.
      this.schedule(QUEUED_RECHECK_MS)
      return
    }
    // Nothing can find it: never this route again for this job (a second paid job), the next one.
    this.lost = null
    if (this.holdsSlot) { this.holdsSlot = false; r.release(this.id) }
    await this.host.record([this.ev('submit', 'lookup_impossible', { note: 'no job list and no callbacks: not sent again on this route' })])
    const next = this.nextServing(this.routeIndex + 1)
    if (next >= 0) { this.routeIndex = next; this.schedule(0); return }
    await this.host.fail(this, 'No provider could take this job; credits refunded', false)
  }

  /** An upstream job a callback named for this job while it runs on another: ours? then cancel it. */
  private async cancelOrphan (o: { provider: string; id: string }): Promise<void> {
    const r = this.routes.find(x => x.provider.name === o.provider && x.provider.find)
    if (!r) { this.schedule(0); return }
    let mine: UpstreamHandle[]
    try { mine = await this.host.find(this, r, new Date(this.row.created_at.getTime() - LOOKUP_MARGIN_MS), o.id) } catch (err) {
      this.orphans.push(o)
      this.errors++
      this.host.log('checking a duplicate upstream job failed', { job: this.id, err: String(err) })
      this.schedule(this.backoffMs())
      return
    }
    if (mine.length === 0) { this.schedule(0); return } // not this job's: nothing to do
    let answer: boolean | string
    try { answer = await r.provider.cancel(mine[0], AbortSignal.timeout(CANCEL_BUDGET_MS)) } catch (err) { answer = String((err as Error)?.message ?? err) }
    const state = answer === true ? 'canceled' : answer === 'requested' ? 'cancel_requested' : 'unconfirmed'
    await this.host.record([{ job_id: this.id, source: 'cancel', route: r.key, state, detail: { upstream_id: o.id, duplicate: true, answer } }])
    this.schedule(0)
  }

  /**
   * Results live in our storage (docs/architecture.md "Providers and media"): every output is copied in
   * (the primary one is the result); an output already in our storage (the simulated provider
   * writes there) is kept as it is.
   */
  private async store (outputs: string[]): Promise<string> {
    if (outputs.length === 0) throw new ResultRejected('the provider reported success without any output')
    const storage = this.host.storage
    const own = storage.url('')
    const urls: string[] = []
    for (let i = 0; i < outputs.length; i++) {
      const o = outputs[i]
      if (o.startsWith(own)) { urls.push(o); continue }
      const stored = await storeResult(storage, i === 0 ? this.id : `${this.id}-${i}`, this.row.type, o, this.host.resultRules)
      urls.push(stored.url)
    }
    return urls[0]
  }
}
