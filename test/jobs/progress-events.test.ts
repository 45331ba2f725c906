// Compact progress events (job-lifecycle): a live job's full view crosses from its
// shard to the front end at creation and at its end; its non-terminal changes in between cross
// as `job.progress` (id, status, progress, updated_at) and are patched into the cached view, so
// GET /v1/jobs/{id} and SSE see exactly what they saw when every tick carried a full view.
import t from 'tap'
import { JobCache, entryBytes } from '../../src/jobs/cache.js'
import type { JobView } from '../../src/jobs/view.js'
import { startServer } from '../helpers/server.js'
import { openSse } from '../helpers/sse.js'
import { paidUser, UNLIMITED_TIERS } from '../helpers/jobs.js'
import { waitFor } from '../helpers/wait.js'

const view = (id: string, o: Partial<JobView> = {}): JobView => ({
  id, status: 'submitted', type: 'image', model: 'nano-banana', prompt: 'a red apple', progress: 0, credits_charged: 10, credits_refunded: 0,
  estimated_seconds: 15, result_url: null, error_message: null, content_policy_violation: false, created_at: '2026-01-01T00:00:00.000Z',
  updated_at: '2026-01-01T00:00:00.000Z', completed_at: null, ...o,
})

t.test('JobCache.progress: a new view with status, progress and updated_at replaced, the rest and its key order kept', async (t) => {
  const c = new JobCache()
  const seen: JobView[] = []
  c.onUpdate((_a, v) => seen.push(v))
  const v0 = view('job_a')
  c.update(7, v0)
  const p = { id: 'job_a', status: 'processing' as const, progress: 42, updated_at: '2026-01-01T00:00:01.000Z' }
  const v1 = c.progress(7, p)
  t.ok(v1 !== null && v1 !== v0, 'a new object (a body serialised for the old view is never served for it)')
  t.equal(JSON.stringify(v1), JSON.stringify({ ...v0, status: 'processing', progress: 42, updated_at: '2026-01-01T00:00:01.000Z' }), 'same JSON as the full view would be')
  t.equal(c.get('job_a')!.view, v1, 'cached')
  t.same(seen, [v0, v1], 'listeners (SSE) get it like a full update')
  t.equal(c.bytes, entryBytes(v0), 'accounted once')
  t.same(v0.progress, 0, 'the old view is not changed')
})

t.test('JobCache.progress: ignored for an uncached job, another account, or a terminal view', async (t) => {
  const c = new JobCache()
  let calls = 0
  c.onUpdate(() => { calls++ })
  const p = { id: 'job_b', status: 'processing' as const, progress: 5, updated_at: '2026-01-01T00:00:01.000Z' }
  t.equal(c.progress(1, p), null, 'not cached: nothing to patch (read from PostgreSQL on next use)')
  t.equal(c.size, 0)
  c.update(1, view('job_b'))
  t.equal(c.progress(2, p), null, 'another account')
  const done = view('job_b', { status: 'completed', progress: 100, result_url: 'https://x/r.png', completed_at: '2026-01-01T00:00:02.000Z' })
  c.update(1, done)
  t.equal(c.progress(1, p), null, 'terminal stays terminal')
  t.same(c.get('job_b')!.view, done)
  t.equal(calls, 2)
})

t.test('JobCache.progress: the patched entry counts as the most recently written (eviction order)', async (t) => {
  const c = new JobCache(1 << 30, 2)
  c.update(1, view('job_1'))
  c.update(1, view('job_2'))
  c.progress(1, { id: 'job_1', status: 'processing', progress: 1, updated_at: '2026-01-01T00:00:01.000Z' })
  c.update(1, view('job_3'))
  t.ok(c.get('job_1'), 'job_1 was written last of the two older ones: kept')
  t.notOk(c.get('job_2'), 'job_2 evicted first')
})

t.test('through the service: ticks cross as job.progress; GET and SSE see every change', async (t) => {
  // nano-banana (15 s) at SIM_SPEED 10: 1.5 s, polled every 150 ms (about 9 progress changes).
  const s = await startServer(t, { SIM_SPEED: '10', TIER_LIMITS: UNLIMITED_TIERS })
  const u = await paidUser(s, 200)
  const jobs = s.app.services.jobs
  const full: JobView[] = []
  const compact: Array<JobView | null> = []
  const update = jobs.update.bind(jobs)
  const progress = jobs.progress.bind(jobs)
  let id = ''
  jobs.update = (a, v) => { if (v.id === id) full.push(v); update(a, v) }
  jobs.progress = (a, p) => { const v = progress(a, p); if (p.id === id) compact.push(v); return v }
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a lighthouse at dawn' } })
  t.equal(r.status, 201)
  id = r.body.id
  const st = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': u.key })
  t.equal(st.status, 200)
  const gets: JobView[] = []
  // GET every 40 ms while the job runs, until the stream's done event.
  await waitFor(async () => {
    if (st.events.some(e => e.event === 'done')) return true
    const g = await s.req('GET', `/v1/jobs/${id}`, { key: u.key })
    t.equal(g.status, 200)
    gets.push(g.body)
    return false
  }, { what: 'the SSE done event', timeoutMs: 15_000, everyMs: 40 })
  await st.closed
  jobs.update = update
  jobs.progress = progress
  t.ok(compact.length >= 3, `${compact.length} compact changes crossed`)
  t.ok(compact.every(v => v !== null), 'each patched a cached view')
  t.ok(full.length <= 1, `${full.length} full view(s) crossed after the creation's (the terminal one)`)
  t.equal(full[full.length - 1]?.status, 'completed')
  // Every patched view reached the stream as a status event, in order, with its id.
  const statuses = st.events.filter(e => e.event === 'status')
  for (const v of compact) {
    const e = statuses.find(x => Number(x.id) === Date.parse(v!.updated_at))
    t.ok(e, `SSE saw the change at ${v!.updated_at}`)
    if (e) t.same(JSON.parse(e.data), { id, status: v!.status, progress: v!.progress })
  }
  // GET during the run answered the patched views: same fields as the final view, in the same order.
  const keys = Object.keys(gets[gets.length - 1])
  t.ok(gets.some(g => g.status === 'processing' && g.progress > 0), 'GET saw progress')
  for (const g of gets) t.same(Object.keys(g), keys)
  const mid = gets.filter(g => g.status === 'processing')
  for (const g of mid) t.ok(compact.some(v => v!.progress === g.progress && v!.updated_at === g.updated_at), `GET progress ${g.progress} is a patched view`)
})
