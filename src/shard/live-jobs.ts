import { ApiError } from '../errors.js'
import { getJob, updateJobProgress } from '../db/jobs.js'
import { within } from '../db/connect.js'
import { endJob } from '../db/ledger.js'
import { appendEvents, recordSubmission, recordUnanswered, type UpstreamEvent } from '../db/upstream.js'
import { directiveTextOf } from '../jobs/spec.js'
import { TERMINAL, viewOf, type JobRow, type JobStatus, type JobView } from '../jobs/view.js'
import type { AccountView } from '../domain.js'
import type { ProviderJob, UpstreamHandle, UpstreamState } from '../providers/provider.js'
import type { Route } from '../providers/registry.js'
import type { ResultRules } from '../providers/results.js'
import { embedUrlOf } from '../providers/library-media.js'
import type { Storage } from '../storage/storage.js'
import type { ActorDeps } from './creation.js'
import { JobActor, type JobHost, type UpstreamJobRow } from './job-actor.js'
import type { Mailbox } from './mailbox.js'
import type { KeySlots } from './slots.js'
import { deadlineOf, findLost, submitOn } from './upstream-jobs.js'
import type { WaitingJob } from './waiting.js'
import { isoOf } from '../util/iso-time.js'

/** No upstream history (shared, never written to). */
const NONE: UpstreamEvent[] = Object.freeze([]) as unknown as UpstreamEvent[]

/** What the running jobs need from their account. */
export interface JobsOwner {
  readonly id: number
  readonly deps: ActorDeps
  readonly mailbox: Mailbox
  readonly slots: KeySlots
  readonly state: AccountView | null
  load (): Promise<AccountView> | AccountView
  applyBalance (credits: number, seq: number, freeVideosUsed?: number): boolean
}

/**
 * An account's running jobs and the JobHost side of its actor: status
 * changes, submissions, results and refunds are committed through the group commit
 * (src/db/ledger.ts), each in the account's mailbox; progress ticks change memory and reach GET
 * and SSE as events at once, and the table every few seconds (deps.progress, flushed by the
 * shard).
 */
export class LiveJobs implements JobHost {
  readonly jobs = new Map<string, JobActor>()
  /**
   * Creations of this account between their submission and their adoption, with the callbacks
   * that came for them meanwhile (null: none yet). A fast provider calls back before the
   * creation's commit returned; such a callback waits here until the creation settles, then is
   * taken as any other (docs/providers.md "Callbacks").
   */
  private readonly creating = new Map<string, Array<() => void> | null>()

  constructor (private readonly a: JobsOwner) {}

  get storage (): Storage { return this.a.deps.storage }
  get resultRules (): ResultRules { return this.a.deps.resultRules }
  log (msg: string, extra?: Record<string, unknown>): void { this.a.deps.log('warn', msg, { account: this.a.id, ...extra }) }
  emit (row: JobRow): void { this.a.deps.emit({ type: 'job.updated', accountId: this.a.id, job: viewOf(row) }) }

  /**
   * A non-terminal change of a live job: the compact `job.progress` event (status, progress,
   * updated_at) once the front ends were sent its full view (at creation, or by the first
   * change after a resume); the full view otherwise.
   */
  private emitChange (job: JobActor): void {
    const r = job.row
    if (!job.announced) { job.announced = true; this.emit(r); return }
    this.a.deps.emit({ type: 'job.progress', accountId: this.a.id, id: r.id, status: r.status, progress: r.progress, updated_at: isoOf(r.updated_at) })
  }

  /** Registers a live JobActor for a committed, non-terminal job (creation or resume). */
  adopt (row: UpstreamJobRow, pj?: ProviderJob, routeIndex?: number, handle?: UpstreamHandle | null): JobActor {
    const job = this.actorFor(row, pj, routeIndex, handle)
    this.jobs.set(row.id, job)
    return job
  }

  private actorFor (row: UpstreamJobRow, pj?: ProviderJob, routeIndex?: number, handle?: UpstreamHandle | null): JobActor {
    const providers = this.a.deps.providers
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
      id: row.id, type: row.type, model: row.model, text: directiveTextOf(row.request, row.prompt), estimatedSeconds: row.estimated_seconds,
      request: row.request,
    }, routes, this, expectedMs(row, routes[index], this.a.deps.simSpeed), index, h)
  }

  /** Resume a claimed job (restart, or another node's expired lease): it holds a slot here now. */
  resume (row: JobRow): void {
    if (this.jobs.has(row.id) || this.a.deps.waiting?.has(row.id)) return
    this.a.slots.run(row.key_id, row.id, this.a.state !== null)
    const job = this.adopt(row)
    // A submitted job holds a slot of its route's capacity again (a lost submission too: the
    // upstream job it may have created uses that capacity).
    if (job.handle !== null || job.lost) { job.route.adopt(job.id); job.took(job.route) }
    // A job its provider calls back waits for its next reconciliation poll (its callback may
    // have been lost while no process ran: that poll finds it); any other looks at once.
    job.schedule(job.handle !== null && job.reconciles ? Math.min(job.pollDelay(), Math.max(1, job.row.deadline_at.getTime() - Date.now())) : 1)
  }

  /**
   * JobHost.park (docs/architecture.md "Waiting jobs"): the job leaves memory for a record of the
   * shard's waiting index, keeping its key slot and route capacity (it still runs upstream).
   */
  park (job: JobActor, delayMs: number): boolean {
    const w = this.a.deps.waiting
    if (!w || job.terminal || this.jobs.get(job.id) !== job) return false
    job.parked = true
    job.terminal = true
    this.jobs.delete(job.id)
    w.add(job.id, this.a.id, job.row.key_id, Date.now() + delayMs, job.polls, job.label)
    return true
  }

  settled (): void { this.a.deps.waiting?.settled() }

  /** A creation of this account is about to submit `jobId`: its callbacks wait for `createdJob`. */
  creatingJob (jobId: string): void { this.creating.set(jobId, null) }

  /** The creation of `jobId` settled (adopted, or not run): the callbacks that waited are taken now. */
  createdJob (jobId: string): void {
    const waiting = this.creating.get(jobId)
    this.creating.delete(jobId)
    if (waiting) for (const go of waiting) go()
  }

  /**
   * A waiting job runs again: due (`byDue`), or its callback came. `row` is its stored row
   * (null: gone). One that ended or moved meanwhile leaves as a dropped live job does.
   */
  wake (row: UpstreamJobRow | undefined, rec: WaitingJob, byDue: boolean, state?: UpstreamState): JobActor | null {
    const w = this.a.deps.waiting
    w?.woken(rec)
    if (this.jobs.has(rec.id)) { if (byDue) w?.settled(); return this.jobs.get(rec.id)! }
    if (!row || TERMINAL.has(row.status) || row.owner !== this.a.deps.nodeId || row.provider_job_id === null) {
      if (byDue) w?.settled()
      this.a.slots.end(rec.key < 0 ? null : rec.key, rec.id, false)
      if (row) {
        this.a.deps.providers.routeOf(row.model, row.route ?? null, row.provider).release(rec.id)
        if (TERMINAL.has(row.status) || row.owner !== this.a.deps.nodeId) this.emit(row)
      }
      return null
    }
    const job = this.adopt(row)
    job.restore(rec.polls, rec.label)
    // It kept its route's capacity slot while it waited.
    job.took(job.route)
    job.woken = byDue
    job.poke(state ?? rec.pushed as UpstreamState | undefined)
    return job
  }

  /**
   * A verified provider callback for a job of this account. A live job takes it at once. A
   * waiting job is claimed from the shard's index and its row read outside the account's
   * mailbox, batched with the other reads of the moment (TurnReads), then runs again with this
   * state. A job this node does not run (another node holds its lease) is settled here when the
   * callback reports an end: the terminal transition is a conditional UPDATE with the refund in
   * the same transaction, so exactly one node moves the money.
   *
   * `upstreamId` (the front end read no row: job and account came from our callback URL): the
   * callback is taken only by a job this node runs holding that upstream id; otherwise the answer
   * is 'unmatched' and the front end looks the id up in the database (docs/providers.md "Callbacks").
   */
  callback (jobId: string, state: UpstreamState | undefined, upstream?: { provider: string; id: string }, upstreamId?: string): Promise<'live' | 'settled' | 'ignored' | 'unmatched'> {
    if (this.creating.has(jobId)) {
      // Still being created (its commit not returned yet): taken once it is adopted, or
      // answered as for any job this node does not run if its creation failed.
      return new Promise((resolve, reject) => {
        let q = this.creating.get(jobId)
        if (!q) this.creating.set(jobId, q = [])
        q.push(() => { this.callback(jobId, state, upstream, upstreamId).then(resolve, reject) })
      })
    }
    const w = this.a.deps.waiting
    // A waiting job of this account (docs/architecture.md "Waiting jobs"; the index is the
    // shard's, and an id from a callback URL may name another account's job): found by id, run
    // again with this state.
    if (w !== undefined && !this.jobs.has(jobId) && w.get(jobId)?.account === this.a.id) {
      const rec = w.claim(jobId, upstream || upstreamId !== undefined ? undefined : state)
      if (rec !== null) return this.unpark(rec, state, upstream, upstreamId)
      // Being woken: the state goes along with its wake-up (kept by claim). One whose upstream
      // id is still to check is answered from the database's side.
      return Promise.resolve(upstreamId !== undefined ? 'unmatched' as const : 'live' as const)
    }
    return this.a.mailbox.post(() => {
      const live = this.jobs.get(jobId)
      if (upstreamId !== undefined) {
        if (!live || live.handle?.id !== upstreamId) return 'unmatched' as const
        live.poke(state)
        return 'live' as const
      }
      return this.deliver(jobId, live, state, upstream)
    })
  }

  /** A claimed waiting job: its row read (batched), then, in the account's turn, it runs again. */
  private async unpark (rec: WaitingJob, state: UpstreamState | undefined, upstream?: { provider: string; id: string }, upstreamId?: string): Promise<'live' | 'settled' | 'ignored' | 'unmatched'> {
    const w = this.a.deps.waiting!
    let row: UpstreamJobRow | undefined
    try {
      row = await (this.a.deps.rows ? this.a.deps.rows.get(rec.id) : within(getJob(this.a.deps.sql, rec.id))) as UpstreamJobRow | undefined
    } catch (err) {
      // Read again at its due time (soon); the provider sends the callback again on our error.
      w.unclaim(rec, Date.now() + 1000)
      throw err
    }
    if (upstreamId !== undefined && (row === undefined || row.provider_job_id !== upstreamId || row.account_id !== this.a.id)) {
      // Not this job's callback: it waits again, due now if a callback of its own came meanwhile.
      w.unclaim(rec, rec.pushed !== undefined ? Date.now() : undefined)
      return 'unmatched'
    }
    return this.a.mailbox.post(() => {
      const woke = this.wake(row, rec, false, upstream ? undefined : state)
      if (woke !== null && !upstream) return 'live' as const
      // Ended or moved meanwhile (its record is dropped): the front end's lookup answers it, and
      // records a success that came after the end.
      if (woke === null && upstreamId !== undefined) return 'unmatched' as const
      return this.deliver(rec.id, woke ?? undefined, state, upstream, row ?? null)
    })
  }

  /**
   * The callback for `live` (undefined: not running here), in the account's turn. `known`: the
   * job's row when it was just read (null: gone).
   */
  private async deliver (jobId: string, live: JobActor | undefined, state: UpstreamState | undefined, upstream?: { provider: string; id: string }, known?: UpstreamJobRow | null): Promise<'live' | 'settled' | 'ignored'> {
    // An upstream id no job holds, named for this job by its callback URL: the job checks it
    // (a lost submission to adopt, or a duplicate to cancel). Only the node running it acts.
    if (upstream) {
      if (!live) return 'ignored'
      live.candidate(upstream.provider, upstream.id)
      return 'live'
    }
    if (live) { live.poke(state); return 'live' }
    const row = known !== undefined ? known ?? undefined : await within(getJob(this.a.deps.sql, jobId)) as UpstreamJobRow | undefined
    if (!row || row.account_id !== this.a.id || TERMINAL.has(row.status) || row.provider_job_id === null) return 'ignored'
    await this.a.load()
    const job = this.actorFor(row)
    // Not registered: it runs one step and is dropped (the owner keeps polling).
    job.oneShot = true
    job.poke(state)
    return 'settled'
  }

  /** A job this node no longer runs (ended elsewhere, or leased to another node). */
  forget (job: JobActor): void {
    job.stop()
    // A job settled for a callback without being adopted (callback()) was never counted here.
    if (this.jobs.get(job.id) !== job) return
    this.jobs.delete(job.id)
    this.a.slots.end(job.row.key_id, job.id, false)
    this.a.deps.progress.delete(job.id)
  }

  /**
   * Lease renewal found the job no longer ours (ended on another node, which settled a callback,
   * or leased elsewhere): stop our copy and give the read cache and SSE the stored view, or GET
   * on this node would keep answering the last state this node knew.
   */
  dropped (job: JobActor): Promise<void> {
    const known = job.row.status
    this.forget(job)
    return this.refreshView(job.id, known)
  }

  private finished (job: JobActor): void {
    const counted = this.jobs.get(job.id) === job
    this.forget(job)
    if (counted) this.a.slots.free(job.row.key_id, job.id)
  }

  /** The job ended elsewhere: the read cache and SSE get the stored terminal view. */
  private async refreshView (id: string, known?: JobStatus): Promise<void> {
    try {
      const row = await within(getJob(this.a.deps.sql, id))
      if (row && (TERMINAL.has(row.status) || (known !== undefined && row.status !== known))) this.emit(row)
    } catch {}
  }

  progress (job: JobActor, status: JobStatus, progress: number, events?: UpstreamEvent[]): Promise<void> {
    const r = job.row
    const ev = job.route.recordsHistory && events !== undefined ? events : NONE
    if (status === r.status && ev.length === 0) {
      // A progress tick changes only this job's memory (written by the shard's flush): it needs
      // no turn in the account's mailbox (the job's own ticks never overlap, and every other
      // change of the job checks `terminal` in the mailbox).
      if (!job.terminal) this.tickProgress(job, progress)
      return Promise.resolve()
    }
    return this.a.mailbox.post(async () => {
      if (job.terminal) return
      const at = new Date()
      if (ev.length === 0) await this.a.deps.commit.transition({ id: job.id, status, progress, at })
      else {
        await this.a.deps.commit.run(async (tx) => {
          await updateJobProgress(tx, job.id, status, progress, null, at)
          await appendEvents(tx, ev)
        })
      }
      this.a.deps.progress.delete(job.id)
      r.status = status
      r.progress = progress
      r.updated_at = at
      this.emitChange(job)
    })
  }

  private tickProgress (job: JobActor, progress: number): void {
    const r = job.row
    if (!this.a.deps.progress.has(job.id)) this.a.deps.progress.set(job.id, { row: r, since: Date.now() })
    r.progress = progress
    r.updated_at = new Date()
    this.emitChange(job)
  }

  /** A queued job (or one whose creation timed out) handed to its provider. */
  submitted (job: JobActor, route: Route, handle: UpstreamHandle, events: UpstreamEvent[]): Promise<void> {
    return this.a.mailbox.post(async () => {
      if (job.terminal) return
      const at = new Date()
      const deadline = this.deadlineFrom(job, route, at.getTime())
      await this.a.deps.commit.run(async (tx) => {
        await recordSubmission(tx, job.id, { route: route.key, provider: route.provider.name, handle, deadline, at })
        if (events.length && route.recordsHistory) await appendEvents(tx, events)
      })
      Object.assign(job.row, { status: 'submitted', provider: route.provider.name, provider_job_id: handle.id, upstream: handle, route: route.key, submitted_at: at, deadline_at: deadline, updated_at: at })
      this.emitChange(job)
    })
  }

  record (events: UpstreamEvent[]): Promise<void> {
    if (events.length === 0) return Promise.resolve()
    return this.a.deps.commit.run(tx => appendEvents(tx, events))
  }

  deadlineFrom (job: JobActor, route: Route, at: number): Date {
    return deadlineOf(route, job.row.estimated_seconds, this.a.deps.simSpeed, at)
  }

  submitWith (job: JobActor, route: Route): Promise<UpstreamHandle> {
    return submitOn(route, job.pj, this.a.id, job.row.prompt, this.a.deps.publicBaseUrl)
  }

  /** A submission without a definitive answer (docs/providers.md "No duplicate upstream jobs"). */
  unanswered (job: JobActor, route: Route, events: UpstreamEvent[]): Promise<void> {
    return this.a.mailbox.post(async () => {
      if (job.terminal) return
      const at = new Date()
      await this.a.deps.commit.run(async (tx) => {
        await recordUnanswered(tx, job.id, { route: route.key, provider: route.provider.name, at })
        if (events.length && route.recordsHistory) await appendEvents(tx, events)
      })
      const changed = job.row.status !== 'submitted'
      Object.assign(job.row, { status: 'submitted', provider: route.provider.name, route: route.key, updated_at: at })
      if (changed) this.emitChange(job)
    })
  }

  find (job: JobActor, route: Route, since: Date, candidate?: string): Promise<UpstreamHandle[]> {
    return findLost(this.a.deps.sql, route, job.pj, this.a.id, job.row.prompt, this.a.deps.publicBaseUrl, since, candidate)
  }

  /**
   * The completion is queued in the account's turn and awaited after it (docs/architecture.md
   * "Durability"): the account's next message does not wait for this commit, so the completions
   * of one account join one group commit. `terminal` keeps every later change of the job out
   * meanwhile; a commit that fails gives the job back to its tick, which retries.
   */
  complete (job: JobActor, resultUrl: string, events: UpstreamEvent[] = [], thumbnailUrl: string | null = null): Promise<void> {
    const at = new Date()
    return this.a.mailbox.post(() => {
      if (job.terminal) return null
      const base = this.a.deps.publicBaseUrl
      const history = job.route.recordsHistory ? { route: job.route.key, events } : null
      const media = { thumbnailUrl, embedUrl: (token: string) => embedUrlOf(base, token) }
      job.terminal = true
      return { done: this.a.deps.commit.complete({ row: job.row, resultUrl, at }, { history, media }) }
    }).then(async (queued) => {
      if (queued === null) return
      let done: boolean
      try { done = await queued.done } catch (err) { job.terminal = false; throw err }
      const r = job.row
      this.finished(job)
      if (!done) { await this.refreshView(r.id); return }
      Object.assign(r, { status: 'completed', progress: 100, result_url: resultUrl, updated_at: at, completed_at: at })
      this.emit(r)
    })
  }

  fail (job: JobActor, message: string, policyViolation: boolean, events: UpstreamEvent[] = []): Promise<void> {
    return this.a.mailbox.post(() => this.terminate(job, 'failed', message, policyViolation, job.route.recordsHistory ? events : []))
  }

  /** failed or cancelled: the refund commits with the terminal state (docs/architecture.md "Durability"). */
  private async terminate (job: JobActor, status: 'failed' | 'cancelled', message: string | null, policyViolation: boolean, events: UpstreamEvent[] = []): Promise<void> {
    if (job.terminal) return
    const r = job.row
    const at = new Date()
    const commit = this.a.deps.commit
    const done = await commit.run(tx => endJob(tx, r, status, message, policyViolation, at, events, b => commit.stamp(b)))
    this.finished(job)
    if (done === false) { await this.refreshView(r.id); return }
    const s = this.a.state
    if (s) {
      if (done.credits !== null) this.a.applyBalance(done.credits, done.seq)
      if (r.free_trial) s.free_videos_used = Math.max(0, s.free_videos_used - 1)
    }
    Object.assign(r, {
      status, error_message: message, content_policy_violation: policyViolation, credits_refunded: r.credits_charged, updated_at: at, completed_at: at
    })
    this.emit(r)
  }

  /** DELETE /jobs/{id} (docs/api.md "Jobs"): only a queued job can be cancelled. */
  cancel (jobId: string): Promise<JobView> {
    return this.a.mailbox.post(async () => {
      await this.a.load()
      let live = this.jobs.get(jobId)
      if (!live) {
        const row = await within(getJob(this.a.deps.sql, jobId))
        if (!row || row.account_id !== this.a.id) throw new ApiError('JOB_NOT_FOUND')
        if (row.status !== 'queued') throw new ApiError('CANNOT_CANCEL', `Job ${jobId} is ${row.status}; only queued jobs can be cancelled`, { status: row.status })
        // Queued but leased by another node: nothing was sent to a provider, so it can be
        // cancelled here; the other node drops its copy at its next lease renewal.
        this.a.slots.run(row.key_id, row.id, true)
        live = this.adopt(row)
      }
      if (live.row.status !== 'queued' || live.submitting) {
        throw new ApiError('CANNOT_CANCEL', `Job ${jobId} is ${live.row.status}; only queued jobs can be cancelled`, { status: live.row.status })
      }
      await this.terminate(live, 'cancelled', 'Cancelled by the client; credits refunded', false)
      return viewOf(live.row)
    })
  }
}

function expectedMs (row: JobRow, route: Route, simSpeed: number): number {
  if (!route.provider.simulated) return row.estimated_seconds * 1000
  return row.model === 'voiceover' ? 1 : row.estimated_seconds * 1000 / simSpeed
}
