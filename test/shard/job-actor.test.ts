// The JobActor state machine (docs/api.md "Jobs") without threads or a database: a fake host
// (the AccountActor's persistence) and a fake provider. No job stays non-terminal
// forever, even when a write to the database fails for a moment.
import t from 'tap'
import { JobActor, PARK_GRACE_MS, type JobHost } from '../../src/shard/job-actor.js'
import type { JobRow, JobStatus } from '../../src/jobs/view.js'
import { UpstreamRefused, type ProviderJob, type RouteProvider, type UpstreamHandle, type UpstreamState } from '../../src/providers/provider.js'
import { Route } from '../../src/providers/registry.js'
import type { Storage } from '../../src/storage/storage.js'
import { sleep, waitFor } from '../helpers/wait.js'


function rowOf (over: Partial<JobRow> = {}): JobRow {
  const now = new Date()
  return {
    id: 'job_AAAAAAAAAAAAAAAA', account_id: 1, key_id: 1, type: 'image', model: 'nano-banana', status: 'submitted',
    prompt: 'p', request: {}, progress: 0, credits_charged: 10, credits_refunded: 0, estimated_seconds: 1,
    result_url: null, error_message: null, content_policy_violation: false, provider: 'fake', provider_job_id: null,
    idempotency_key: null, request_hash: null, source_job_id: null, free_trial: false,
    deadline_at: new Date(now.getTime() + 60_000), created_at: now, updated_at: now, completed_at: null,
    ...over,
  }
}

const storage = { url: (key: string) => `mem://${key}` } as unknown as Storage
type Provider = RouteProvider & { submits: number[] }

/** A host that records what it persists and fails the first `failures` writes. */
function hostOf (failures: number) {
  const calls: string[] = []
  let left = failures
  const write = () => { if (left > 0) { left--; throw new Error('connection reset (simulated database hiccup)') } }
  const host: JobHost & { calls: string[] } = {
    calls,
    storage,
    resultRules: { allowlist: [], maxBytes: 1e6, timeoutMs: 1000, attempts: 1 },
    log: () => {},
    async progress (job, status: JobStatus, progress) {
      write()
      if (job.terminal) return
      job.row.status = status
      job.row.progress = progress
      calls.push(`progress ${status} ${progress}`)
    },
    async submitted (job, _route, handle) {
      write()
      if (job.terminal) return
      job.row.provider_job_id = handle.id
      calls.push(`submitted ${handle.id}`)
    },
    submitWith: (job, route) => route.provider.submit({ jobId: job.id, model: 'm', input: {}, callbackUrl: null }, job.pj),
    async unanswered (job) { write(); calls.push(`unanswered ${job.id}`) },
    find: async () => [],
    async record () {},
    deadlineFrom: (job) => job.row.deadline_at,
    async complete (job, url) {
      write()
      if (job.terminal) return
      job.stop()
      job.row.status = 'completed'
      calls.push(`complete ${url}`)
    },
    async fail (job, message) {
      write()
      if (job.terminal) return
      job.stop()
      job.row.status = 'failed'
      calls.push(`fail ${message}`)
    },
  }
  return host
}

/** A provider that accepts at once (or after `answerMs`) and completes after `polls` polls. */
function providerOf (o: { polls?: number; answerMs?: number; refuse?: boolean } = {}) {
  let n = 0
  const submits: number[] = []
  const p: Provider = {
    name: 'fake',
    simulated: true,
    submits,
    accepts: () => true,
    async submit (): Promise<UpstreamHandle> {
      submits.push(Date.now())
      if (o.answerMs) await sleep(o.answerMs) // time: a provider slow on purpose (its answer lands after the creation timed out)
      if (o.refuse) throw new UpstreamRefused('refused')
      return { id: `p${submits.length}`, model: 'm' }
    },
    async status (_h: UpstreamHandle, job: ProviderJob): Promise<UpstreamState> {
      n++
      if (n < (o.polls ?? 3)) return { state: 'running', progress: n * 10 }
      return { state: 'succeeded', outputs: [storage.url(`results/${job.id}.png`)] }
    },
    async cancel () { return true },
  }
  return p
}

/** Waits for the job to reach a terminal state. */
const terminal = (job: JobActor, timeoutMs = 5000) => waitFor(() => job.terminal, { what: () => `job ${job.id} to reach a terminal state (${job.row.status})`, timeoutMs, everyMs: 5 })

function start (row: JobRow, provider: Provider, host: JobHost): JobActor {
  const pj: ProviderJob = { id: row.id, type: row.type, model: row.model, text: 'p', estimatedSeconds: 1, request: {} }
  const route = new Route('m#0:fake:m', row.model, { provider: 'simulated', model: 'm' }, provider, Infinity)
  const handle = row.provider_job_id ? { id: row.provider_job_id, model: 'm' } : null
  return new JobActor(row, pj, [route], host, 100, 0, handle) // polls every 20 ms
}

t.test('a polled job moves through processing to completed with monotonic progress', async (t) => {
  const host = hostOf(0)
  const job = start(rowOf({ provider_job_id: 'p0' }), providerOf({ polls: 4 }), host)
  job.schedule(1)
  await terminal(job)
  t.same(host.calls, ['progress processing 10', 'progress processing 20', 'progress processing 30', 'complete mem://results/job_AAAAAAAAAAAAAAAA.png'])
})

t.test('a failed database write while polling is retried: the job still completes', async (t) => {
  const host = hostOf(2)
  const job = start(rowOf({ provider_job_id: 'p0' }), providerOf({ polls: 3 }), host)
  job.schedule(1)
  await terminal(job)
  t.equal(host.calls.at(-1), 'complete mem://results/job_AAAAAAAAAAAAAAAA.png')
})

t.test('a failed write of the final state is retried', async (t) => {
  const host = hostOf(0)
  const provider = providerOf({ polls: 1 })
  let failComplete = 1
  const complete = host.complete.bind(host)
  let writes = 0
  host.complete = async (job, url) => { writes++; if (failComplete-- > 0) throw new Error('commit failed'); return complete(job, url) }
  const job = start(rowOf({ provider_job_id: 'p0' }), provider, host)
  job.schedule(1)
  await terminal(job)
  t.equal(writes, 2, 'the final write failed once and was retried')
  t.equal(host.calls.at(-1), 'complete mem://results/job_AAAAAAAAAAAAAAAA.png', 'completed on the retry')
})

t.test('a submission answered after the creation timed out is recorded once, even if the first write fails, and never resubmitted', async (t) => {
  const host = hostOf(1)
  const provider = providerOf({ polls: 2, answerMs: 50 })
  const job = start(rowOf({ status: 'submitted', provider_job_id: null }), provider, host)
  job.awaitSubmission(provider.submit({ jobId: job.id, model: 'm', input: {}, callbackUrl: null }, job.pj)) // as AccountActor does after a 504
  await terminal(job)
  t.equal(provider.submits.length, 1, 'submitted exactly once')
  t.equal(job.row.provider_job_id, 'p1', 'the provider id was recorded')
  t.equal(host.calls.at(-1), 'complete mem://results/job_AAAAAAAAAAAAAAAA.png')
})

t.test('a refusal that arrives after the timeout fails the job (refund), even if the first write fails', async (t) => {
  const host = hostOf(1)
  const provider = providerOf({ answerMs: 20, refuse: true })
  const job = start(rowOf({ provider_job_id: null }), provider, host)
  job.awaitSubmission(provider.submit({ jobId: job.id, model: 'm', input: {}, callbackUrl: null }, job.pj))
  await terminal(job)
  t.match(host.calls.at(-1), /^fail No provider could take this job; credits refunded/)
  t.notMatch(host.calls.at(-1), /refused/, 'the upstream text ("refused") is not echoed')
})

t.test('a submission that never answers fails at the deadline', async (t) => {
  const host = hostOf(0)
  const never: Provider = { ...providerOf(), submit: () => new Promise(() => {}) }
  const job = start(rowOf({ provider_job_id: null, deadline_at: new Date(Date.now() + 150) }), never, host)
  job.awaitSubmission(never.submit({ jobId: job.id, model: 'm', input: {}, callbackUrl: null }, job.pj))
  await terminal(job, 2000)
  t.match(host.calls, [/deadline/])
})

t.test('polls wake on a 10 ms grid (a shard\'s due jobs poll in one timers phase), not at their own offsets', async (t) => {
  // The wake-up time each poll timer is armed for (delays of a poll, >= 20 ms): the clock
  // reading schedule() made last, plus the delay it armed. Reading the clock again here instead
  // could be a few ms later on a loaded machine, off the grid by that much.
  const targets: number[] = []
  const real = globalThis.setTimeout
  const realNow = Date.now
  let lastNow = realNow()
  Date.now = () => (lastNow = realNow())
  globalThis.setTimeout = ((fn: () => void, ms?: number) => {
    if (ms !== undefined && ms >= 20) targets.push(lastNow + ms)
    return real(fn, ms)
  }) as typeof setTimeout
  t.teardown(() => { globalThis.setTimeout = real; Date.now = realNow })
  // Start 6 ms past a grid line: without the grid every 20 ms poll would be armed off it.
  while (Date.now() % 10 !== 6) await new Promise<void>(resolve => setImmediate(resolve))
  const job = start(rowOf({ provider_job_id: 'p0' }), providerOf({ polls: 8 }), hostOf(0))
  job.schedule()
  await terminal(job)
  globalThis.setTimeout = real
  Date.now = realNow
  t.ok(targets.length >= 7, `${targets.length} polls armed`)
  t.ok(targets.every(x => x % 10 === 0), `every poll is armed for a grid line (${targets.map(x => x % 10).join(',')})`)
})

t.test('a job created on a full route holds its queue place from creation (waitFor), before its first tick, and is submitted when room frees', async (t) => {
  const host = hostOf(0)
  const provider = providerOf({ polls: 1 })
  const route = new Route('m#0:fake:m', 'nano-banana', { provider: 'simulated', model: 'm' }, provider, 1)
  const row = rowOf({ status: 'queued', provider_job_id: null })
  const pj: ProviderJob = { id: row.id, type: row.type, model: row.model, text: 'p', estimatedSeconds: 1, request: {} }
  t.ok(await route.take(pj, 'job_OTHEROTHEROTHER'), 'another job holds the route\'s only slot')
  const job = new JobActor(row, pj, [route], host, 100, 0, null)
  job.waitFor(route)
  t.equal(route.queued, 1, 'queued at once, no tick has run')
  t.equal(route.state().queued, 1, 'health sees it')
  job.waitFor(route)
  t.equal(route.queued, 1, 'a second call keeps one place')
  t.notOk(await route.take(pj, 'job_BBBBBBBBBBBBBBBB'), 'a later job waits behind it')
  job.schedule(0)
  await sleep(100) // time: proves nothing is submitted within a window while the route is full
  t.same([host.calls, provider.submits], [[], []], 'no submission while the route is full')
  route.release('job_OTHEROTHEROTHER') // room frees: the queue's first is woken
  await terminal(job)
  t.equal(provider.submits.length, 1)
  t.equal(route.queued, 0)
})

/** A real-provider route that takes callbacks (polls only reconcile). */
function reconciled (row: JobRow, provider: Provider, host: JobHost, expectedMs: number): JobActor {
  const p = Object.assign(provider, { simulated: false, takesCallbacks: true, verifyCallback: async () => { throw new Error('unused') } }) as Provider
  const pj: ProviderJob = { id: row.id, type: row.type, model: row.model, text: 'p', estimatedSeconds: expectedMs / 1000, request: {} }
  const route = new Route('m#0:fal:m', row.model, { provider: 'fal', model: 'm' }, p, Infinity)
  return new JobActor(row, pj, [route], host, expectedMs, 0, row.provider_job_id ? { id: row.provider_job_id, model: 'm' } : null)
}

t.test('a job its provider calls back is polled first at its expected end, then at doubling gaps up to 10 min (docs/providers.md "Polling and lost callbacks")', async (t) => {
  const host = hostOf(0)
  const submitted = new Date(Date.now() - 10_000)
  const job = reconciled(rowOf({ provider_job_id: 'p0', submitted_at: submitted } as Partial<JobRow>), providerOf(), host, 110_000)
  const first = job.pollDelay()
  t.ok(first > 99_000 && first <= 100_000, `first poll at the estimate after submission (${first} ms from now)`)
  const gaps = [1, 2, 3, 4, 5, 6, 7, 8].map(k => { job.polls = k; return job.pollDelay() })
  t.same(gaps, [27_500, 55_000, 110_000, 220_000, 440_000, 600_000, 600_000, 600_000], 'a quarter of the estimate, doubling, capped at 10 min')
  // Without callbacks (the simulated provider): a tenth of the estimate, at most 5 s.
  const sim = start(rowOf({ provider_job_id: 'p0' }), providerOf(), host)
  t.equal(sim.pollDelay(), 20, 'the simulated provider keeps its cadence')
})

t.test('a waiting job parks instead of keeping a timer, and a job past its deadline is polled once before it is failed', async (t) => {
  const host = hostOf(0)
  const parked: Array<{ id: string; ms: number }> = []
  host.park = (job, ms) => { parked.push({ id: job.id, ms }); job.parked = true; job.terminal = true; return true }
  // Submitted longer ago than PARK_GRACE_MS: parked at once.
  const job = reconciled(rowOf({ provider_job_id: 'p0', created_at: new Date(Date.now() - PARK_GRACE_MS) }), providerOf(), host, 60_000)
  job.schedule()
  t.equal(parked.length, 1, 'parked')
  t.ok(parked[0].ms >= 57_000, `due at its expected end (${parked[0].ms} ms)`)
  t.equal(job.timer, null, 'no timer of its own')
  // Just submitted: it keeps its object (and one timer) for the rest of its grace, then parks
  // with the rest of its wait.
  const youngHost = hostOf(0)
  let youngParked!: (ms: number) => void
  const parkedLater = new Promise<number>((resolve) => { youngParked = resolve })
  youngHost.park = (j, ms) => { j.parked = true; j.terminal = true; youngParked(ms); return true }
  const young = reconciled(rowOf({ provider_job_id: 'p2', created_at: new Date(Date.now() - PARK_GRACE_MS + 50) }), providerOf(), youngHost, 60_000)
  young.schedule()
  t.equal(young.parked, false, 'not parked during its grace')
  t.not(young.timer, null, 'a timer until its grace ends')
  const ms = await parkedLater
  // Its grace ends 58 s before its expected end, and the timer that parks it fires then or a
  // little later: about 58,000 ms left (rounded up to the poll grid), a few ms less when the
  // timer was late, as on a loaded machine.
  t.ok(ms >= 57_000 && ms <= 60_000, `then parked, due at its expected end (${ms} ms)`)
  // A callback during the grace runs the job at once (its live object takes it).
  const quickHost = hostOf(0)
  quickHost.park = () => { throw new Error('a job with a callback state does not park') }
  const quick = reconciled(rowOf({ provider_job_id: 'p3' }), providerOf(), quickHost, 60_000)
  quick.schedule()
  quick.poke({ state: 'succeeded', outputs: [storage.url(`results/${quick.id}.png`)] })
  await terminal(quick)
  t.match(quickHost.calls, [/^complete /], 'completed from the callback state')
  // Past the deadline: the last poll finds it succeeded (its callback was lost), no deadline failure.
  const host2 = hostOf(0)
  const late = reconciled(rowOf({ provider_job_id: 'p1', deadline_at: new Date(Date.now() - 1000) }), providerOf({ polls: 1 }), host2, 60_000)
  late.schedule(0)
  await terminal(late)
  t.same(host2.calls, ['complete mem://results/job_AAAAAAAAAAAAAAAA.png'], 'completed by the last poll, not failed by the deadline')
})
