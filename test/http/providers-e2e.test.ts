// Real providers through the real service (points 2-6 and 8): the service runs
// with a PROVIDERS_FILE routing models to the fal and Replicate contract stubs
// (test/fixtures/*-stub.ts) and takes their signed callbacks at /v1/providers/{name}/callback.
import { writeFile, mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { startFalStub } from '../fixtures/fal-stub.js'
import { startKieStub } from '../fixtures/kie-stub.js'
import { startReplicateStub } from '../fixtures/replicate-stub.js'
import { UNLIMITED_TIERS, balance, dbOf, fetchResult, paidUser, pollJob } from '../helpers/jobs.js'
import { settled, sleep, waitFor } from '../helpers/wait.js'
import { startServer } from '../helpers/server.js'
import { freePort } from '../helpers/net.js'

const fal = await startFalStub()
const rep = await startReplicateStub()
const kie = await startKieStub()
t.teardown(async () => { await fal.close(); await rep.close(); await kie.close() })
const falHost = new URL(fal.url).host
const repHost = new URL(rep.url).host
const kieHost = new URL(kie.url).host

const dir = await mkdtemp(join(tmpdir(), 'gjt-routes-'))
const routesFile = join(dir, 'providers.json')
await writeFile(routesFile, JSON.stringify({
  // Reconciliation polls 5 s after submission (not at the models' estimates) so lost callbacks are found within a test.
  providers: { fal: { reconcile_after_s: 1 }, replicate: { reconcile_after_s: 1 }, kie: { reconcile_after_s: 1 } },
  routes: {
    // Failover: fal first, Replicate second.
    'veo3-fast': [
      { provider: 'fal', model: 'fal-ai/veo3/fast', input: { prompt: '$.prompt', aspect_ratio: '$.aspect_ratio', duration: { from: '$.duration', suffix: 's', default: '8s' } } },
      { provider: 'replicate', model: 'google/veo-3-fast' },
    ],
    // Kie: a callback is only a hint, confirmed with recordInfo.
    'seedance-2-fast': [{ provider: 'kie', model: 'bytedance/v1-pro-text-to-video', input: { prompt: '$.prompt', duration: { from: '$.duration', as: 'number' } } }],
    // A one-second deadline: our refund, then a late upstream success.
    'seedance-2': [{ provider: 'fal', model: 'bytedance/seedance-2.0/text-to-video', deadline_s: 1 }],
    // Capacity: one job at a time upstream.
    'nano-banana': [{ provider: 'fal', model: 'fal-ai/nano-banana', max_concurrent: 1, input: { prompt: '$.prompt', output_format: '$.output_format' } }],
  },
}))

const port = await freePort()
const s = await startServer(t, {
  PORT: String(port),
  PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
  SHARDS: '1',
  TIER_LIMITS: UNLIMITED_TIERS,
  PROVIDERS_FILE: routesFile,
  FAL_KEY: fal.key,
  FAL_QUEUE_URL: fal.url,
  FAL_JWKS_URL: fal.jwksUrl,
  REPLICATE_API_TOKEN: rep.token,
  REPLICATE_API_URL: rep.url,
  REPLICATE_WEBHOOK_SECRET: rep.secret,
  KIE_API_KEY: kie.key,
  KIE_API_URL: kie.url,
  KIE_WEBHOOK_HMAC_KEY: kie.hmacKey,
  WEBHOOK_ALLOWLIST: `${falHost},${repHost},${kieHost}`,
})
const sql = dbOf(t, s)
const u = await paidUser(s, 100_000)

async function admin (id: string): Promise<any> {
  const r = await s.req('GET', `/v1/admin/jobs/${id}`, { admin: true })
  if (r.status !== 200) throw new Error(`admin job: ${r.status} ${r.text}`)
  return r.body
}

/** The stub job our job was submitted as. */
async function upstreamOf (id: string): Promise<string> {
  const a = await admin(id)
  return a.upstream.id
}

t.test('completion by callback: the signed fal callback completes the job before any poll would; the result is our copy', async (t) => {
  fal.plan({ steps: ['queued'], outcome: 'succeeded', media: 'mp4', finishAfterMs: 300 })
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'veo3-fast', prompt: 'a lighthouse in a storm', aspect_ratio: '9:16' } })
  t.equal(r.status, 201, r.text)
  t.equal(r.body.status, 'submitted')
  const upId = await upstreamOf(r.body.id)
  const sj = fal.jobs.get(upId)!
  t.ok(sj, 'fal got the job')
  t.match(sj.callbackUrl, `http://127.0.0.1:${port}/v1/providers/fal/callback`, 'our callback URL was passed as fal_webhook')
  t.same(sj.input, { prompt: 'a lighthouse in a storm', aspect_ratio: '9:16', duration: '8s' }, 'the input mapping of the route')
  // Real routes poll every 5 s at most often (estimate / 10): completion within 3 s is the callback.
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 4000, everyMs: 50 })
  t.equal(job.status, 'completed')
  t.ok(job.result_url.startsWith(`http://127.0.0.1:${port}/files/results/`), `result_url is our copy (${job.result_url})`)
  t.ok(fal.callbacks.some(c => c.status === 200), 'the callback was answered 200')
  const a = await admin(r.body.id)
  t.match(a.route, /^veo3-fast#0:fal:/)
  t.ok(a.upstream_events.some((e: any) => e.source === 'callback' && e.state === 'succeeded'), 'history shows the callback')
  t.ok(a.upstream_events.some((e: any) => e.source === 'stored'), 'history shows the stored result')
  // The upstream copy expires; ours is still served.
  fal.expireMedia()
  const media = await fetchResult(s, job.result_url)
  t.equal(media.status, 200, 'result bytes still served after the provider deleted them')
  t.match(media.headers.get('content-type'), /^video\/mp4/)
  const bytes = Buffer.from(await media.arrayBuffer())
  t.equal(bytes.subarray(4, 8).toString('latin1'), 'ftyp', 'an MP4')
  const lib = await s.req('GET', '/v1/videos', { key: u.key })
  t.equal(lib.body.data.find((v: any) => v.prompt === 'a lighthouse in a storm')?.video_url, job.result_url, 'the library video points at our copy')
})

t.test('the callback URL names job and account for the shard; a forged account or another job\'s upstream id is looked up, never trusted', async (t) => {
  fal.plan({ steps: ['queued'], outcome: 'succeeded', media: 'mp4', finishAfterMs: null, callback: false })
  const one = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'veo3-fast', prompt: 'named one' } })
  const two = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'veo3-fast', prompt: 'named two' } })
  t.equal(one.status, 201, one.text)
  t.equal(two.status, 201, two.text)
  const up1 = await upstreamOf(one.body.id)
  const up2 = await upstreamOf(two.body.id)
  const url1 = new URL(fal.jobs.get(up1)!.callbackUrl!)
  t.equal(url1.searchParams.get('job'), one.body.id, 'the job id in our callback URL')
  t.equal(url1.searchParams.get('account'), String(u.id), 'and its account (the shard to ask)')

  // Job two's signed callback sent to job one's URL: the shard runs job one, which does not hold
  // that upstream id, so the id is looked up: job two completes, job one is untouched.
  fal.finish(up2)
  const crossed = await fal.deliver(up2, { url: url1.href })
  t.equal(crossed.status, 200)
  const { job: done2 } = await pollJob(s, u, two.body.id, { timeoutMs: 4000, everyMs: 50 })
  t.equal(done2.status, 'completed')
  const mid = await s.req('GET', `/v1/jobs/${one.body.id}`, { key: u.key })
  t.not(mid.body.status, 'completed', 'job one did not take job two\'s result')

  // Job one's own callback with a forged account: that account's shard knows no such job; the
  // lookup finds it.
  fal.finish(up1)
  const forged = new URL(url1)
  forged.searchParams.set('account', String(Number(u.id) + 1_000_000))
  const own = await fal.deliver(up1, { url: forged.href })
  t.equal(own.status, 200)
  const { job: done1 } = await pollJob(s, u, one.body.id, { timeoutMs: 4000, everyMs: 50 })
  t.equal(done1.status, 'completed')
  t.not(done1.result_url, done2.result_url, 'each job has its own result')
  const entries = await sql`SELECT job_id, kind FROM credit_entries WHERE job_id IN (${one.body.id}, ${two.body.id}) ORDER BY job_id`
  t.same(entries.map((e: any) => e.kind), ['charge', 'charge'], 'one charge each, no refund')
})

t.test('the same callback three times at once for a waiting job: one wake-up, one completion, every copy answered 200', async (t) => {
  fal.plan({ steps: ['queued'], outcome: 'succeeded', media: 'mp4', finishAfterMs: null, callback: false })
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'veo3-fast', prompt: 'three at once' } })
  t.equal(r.status, 201, r.text)
  const upId = await upstreamOf(r.body.id)
  fal.finish(upId)
  const first = await Promise.all([fal.deliver(upId), fal.deliver(upId), fal.deliver(upId)])
  t.same(first.map(c => c.status), [200, 200, 200])
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 4000, everyMs: 50 })
  t.equal(job.status, 'completed')
  const a = await admin(r.body.id)
  t.equal(a.upstream_events.filter((e: any) => e.source === 'stored').length, 1, 'the result stored once')
  const entries = await sql`SELECT kind FROM credit_entries WHERE job_id = ${r.body.id}`
  t.same(entries.map((e: any) => e.kind), ['charge'], 'one charge, no refund')
})

t.test('a job that ended elsewhere: its own callback records the late success, no money moved', async (t) => {
  fal.plan({ steps: ['queued'], outcome: 'succeeded', media: 'mp4', finishAfterMs: null, callback: false })
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'veo3-fast', prompt: 'ended elsewhere' } })
  t.equal(r.status, 201, r.text)
  const upId = await upstreamOf(r.body.id)
  // As another node's refund would leave it (this node still holds the job's waiting record).
  await sql.begin(async (tx: any) => {
    const [j] = await tx`UPDATE jobs SET status = 'failed', error_message = 'ended elsewhere', credits_refunded = credits_charged, completed_at = now(), updated_at = now()
      WHERE id = ${r.body.id} RETURNING account_id, credits_charged`
    await tx`INSERT INTO credit_entries (account_id, delta, kind, job_id, note) VALUES (${j.account_id}, ${j.credits_charged}, 'refund', ${r.body.id}, 'ended elsewhere')`
    await tx`UPDATE accounts SET credits = credits + ${j.credits_charged} WHERE id = ${j.account_id}`
  })
  fal.finish(upId)
  const cb = await fal.deliver(upId)
  t.equal(cb.status, 200)
  // A job still in its first seconds is live (docs/architecture.md "Waiting jobs"): it takes the
  // callback, downloads the result and records the late success after the answer; a parked one
  // is read back and the front end records it before answering.
  let a: any
  await waitFor(async () => { a = await admin(r.body.id); return a.upstream_events.some((e: any) => e.source === 'late' && e.state === 'succeeded') }, { what: 'the late success in its history', timeoutMs: 10_000 })
  t.equal(a.job.status, 'failed', 'still failed')
  const entries = await sql`SELECT kind FROM credit_entries WHERE job_id = ${r.body.id}`
  t.same(entries.map((e: any) => e.kind).sort(), ['charge', 'refund'], 'the other node\'s refund only: the callback moved no money')
})

t.test('forged, stale, wrong-key and replayed callbacks change nothing; lost callback: polling completes the job', async (t) => {
  fal.plan({ steps: ['queued'], outcome: 'succeeded', media: 'mp4', finishAfterMs: null, callback: false })
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'veo3-fast', prompt: 'forgery target' } })
  t.equal(r.status, 201, r.text)
  const upId = await upstreamOf(r.body.id)
  fal.finish(upId) // ended upstream; its callback is lost (plan callback: false)

  const forged = await fal.deliver(upId, { tamper: b => b.replace('"OK"', '"ERROR"') })
  t.equal(forged.status, 401, 'a tampered body fails verification')
  const stale = await fal.deliver(upId, { timestampOffsetS: -3600 })
  t.equal(stale.status, 401, 'a callback signed an hour ago is stale')
  const wrong = await fal.deliver(upId, { wrongKey: true })
  t.equal(wrong.status, 401, 'a key fal does not publish')
  const mid = await s.req('GET', `/v1/jobs/${r.body.id}`, { key: u.key })
  t.not(mid.body.status, 'failed', 'none of them failed the job')

  // Reconciliation: the job's first poll (reconcile_after_s, at least 5 s after submission) finds the end.
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 12_000, everyMs: 200 })
  t.equal(job.status, 'completed')
  const a = await admin(r.body.id)
  t.ok(a.upstream_events.some((e: any) => e.source === 'poll' && e.state === 'succeeded'), 'completed by polling')

  // A valid callback delivered now, and replayed byte for byte: 200, nothing changes.
  const late = await fal.deliver(upId)
  t.equal(late.status, 200)
  const again = await fal.replay(late)
  t.equal(again.status, 200, 'a replay is verified (same bytes) and idempotent')
  const entries = await sql`SELECT kind FROM credit_entries WHERE job_id = ${r.body.id}`
  t.same(entries.map((e: any) => e.kind), ['charge'], 'one charge, no refund')
})

t.test('failover: fal refuses definitively, Replicate runs the job; charged once', async (t) => {
  fal.fault({ route: 'submit', status: 422, body: { detail: 'unprocessable input' } })
  rep.plan({ steps: ['running'], outcome: 'succeeded', media: 'mp4', finishAfterMs: 300 })
  const before = await balance(s, u)
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'veo3-fast', prompt: 'failover please' } })
  t.equal(r.status, 201, r.text)
  const a = await admin(r.body.id)
  t.match(a.route, /^veo3-fast#1:replicate:/, 'ran on the second route')
  t.equal(a.provider, 'replicate')
  t.ok(a.upstream_events.some((e: any) => e.source === 'refused' && /fal/.test(e.route)), 'the refusal is in the history')
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 12_000, everyMs: 100 })
  t.equal(job.status, 'completed')
  t.equal(before - (await balance(s, u)), r.body.credits_charged, 'charged exactly once')
})

t.test('every route refuses: 502 PROVIDER_ERROR and nothing charged', async (t) => {
  fal.fault({ route: 'submit', status: 422, body: { detail: 'no' } })
  rep.fault({ route: 'submit', status: 422, body: { title: 'Invalid input', detail: 'no', status: 422 } })
  const before = await balance(s, u)
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'veo3-fast', prompt: 'refused everywhere' } })
  t.equal(r.status, 502, r.text)
  t.equal(r.body.code, 'PROVIDER_ERROR')
  t.equal(r.body.message, 'No provider could take this job; nothing was charged', 'neutral: no provider name, no upstream text')
  t.notMatch(r.text, /fal|replicate|HTTP|422|Invalid input/)
  t.equal(await balance(s, u), before, 'nothing charged')
})

t.test('capacity: a full route queues charged jobs in order; DELETE refunds a queued one; the next is submitted as room frees', async (t) => {
  fal.plan({ steps: ['running'], outcome: 'succeeded', media: 'png', finishAfterMs: null })
  const a = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'first' } })
  t.equal(a.status, 201, a.text)
  t.equal(a.body.status, 'submitted')
  const b = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'second' } })
  t.equal(b.status, 201)
  t.equal(b.body.status, 'queued', 'route full: queued at once, charged')
  const c = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'third' } })
  t.equal(c.body.status, 'queued')
  const view = await s.req('GET', '/v1/admin/providers', { admin: true })
  const route = view.body.providers.find((p: any) => p.model === 'nano-banana')
  t.match(route, { provider: 'fal', upstream_model: 'fal-ai/nano-banana', in_flight: 1, queued: 2, max_concurrent: 1, breaker: 'closed' }, 'the operator view shows the route')
  // The same view in /metrics; the public health names no provider, upstream model or count.
  const metrics = await s.req('GET', '/metrics', { admin: true })
  t.match(metrics.text, /genjobs_provider_route_in_flight\{model="nano-banana",route="nano-banana#0:fal:fal-ai\/nano-banana",provider="fal",upstream_model="fal-ai\/nano-banana"\} 1\n/)
  t.match(metrics.text, /genjobs_provider_route_queued\{model="nano-banana",[^}]*\} 2\n/)
  const health = await s.req('GET', '/v1/health')
  t.same(Object.keys(health.body).sort(), ['checks', 'service', 'status', 'timestamp', 'version'])
  t.notMatch(health.text, /fal|replicate|kie|nano-banana|in_flight/, 'nothing of the routes in the public health')
  t.equal((await s.req('GET', '/v1/admin/providers')).status, 401, 'the route view needs the admin token')

  const before = await balance(s, u)
  const del = await s.req('DELETE', `/v1/jobs/${b.body.id}`, { key: u.key })
  t.equal(del.status, 200, del.text)
  t.equal(del.body.status, 'cancelled')
  t.equal(await balance(s, u) - before, b.body.credits_charged, 'refunded in full')

  fal.plan({ steps: ['running'], outcome: 'succeeded', media: 'png', finishAfterMs: 200 })
  fal.finish(await upstreamOf(a.body.id))
  const first = await pollJob(s, u, a.body.id, { timeoutMs: 5000 })
  t.equal(first.job.status, 'completed')
  const third = await pollJob(s, u, c.body.id, { timeoutMs: 8000 })
  t.equal(third.job.status, 'completed', 'the queued job ran once room freed')
  t.equal(fal.jobs.size >= 2, true)
  const subs = [...fal.jobs.values()].filter(j => j.model === 'fal-ai/nano-banana').map(j => j.input.prompt)
  t.same(subs, ['first', 'third'], 'the cancelled job never reached the provider; order kept')
})

t.test('Kie: a verified callback is a hint; its unsigned body changes nothing until recordInfo confirms', async (t) => {
  kie.plan({ steps: ['running', 'running', 'running', 'running'], outcome: 'succeeded', media: 'mp4', finishAfterMs: null })
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'seedance-2-fast', prompt: 'kie hint', duration: '6' } })
  t.equal(r.status, 201, r.text)
  const upId = await upstreamOf(r.body.id)
  t.same(kie.jobs.get(upId)!.input, { prompt: 'kie hint', duration: 6 }, 'mapped input, duration as a number')
  // Signed (taskId.timestamp) but with a body claiming failure: the service asks recordInfo.
  const forged = await kie.deliver(upId, { tamper: b => b.replace('"state":"generating"', '"state":"fail"').replace('"state":"waiting"', '"state":"fail"') })
  t.match(forged.body, /"state":"fail"/, 'the delivered body claims failure')
  t.equal(forged.status, 200, 'the HMAC verifies (it does not cover the body)')
  await sleep(300) // time: proves the forged body does not fail the job within a window
  const mid = await s.req('GET', `/v1/jobs/${r.body.id}`, { key: u.key })
  t.not(mid.body.status, 'failed', 'the unsigned body did not fail the job')
  t.equal(mid.body.credits_refunded, 0)
  kie.finish(upId) // ends with success and calls back
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 6000, everyMs: 50 })
  t.equal(job.status, 'completed', 'completed after the callback hint was confirmed')
  const a = await admin(r.body.id)
  t.ok(a.upstream_events.some((e: any) => e.source === 'poll' && e.state === 'succeeded'), 'the success came from recordInfo')
})

t.test('our deadline: upstream cancel attempted, refund; a late upstream success moves no money and is recorded', async (t) => {
  fal.plan({ steps: Array(50).fill('running'), outcome: 'succeeded', media: 'mp4', finishAfterMs: null })
  fal.fault({ route: 'cancel', status: 400, body: { status: 'ALREADY_COMPLETED' } })
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'seedance-2', prompt: 'too slow' } })
  t.equal(r.status, 201, r.text)
  const upId = await upstreamOf(r.body.id)
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 6000, everyMs: 50 })
  t.equal(job.status, 'failed')
  t.equal(job.credits_refunded, r.body.credits_charged, 'refunded at our deadline')
  t.ok(fal.requests.some(q => q.route === 'cancel'), 'an upstream cancel was attempted first')
  const after = await balance(s, u)
  fal.finish(upId, 'succeeded')
  await fal.waitFor(() => fal.callbacks.some(c => c.jobId === upId), 5000, 'late callback')
  const rec = fal.callbacks.find(c => c.jobId === upId)!
  t.equal(rec.status, 200, 'the late callback is verified and answered 200')
  t.equal(await balance(s, u), after, 'no money moved')
  const a = await admin(r.body.id)
  t.equal(a.job.status, 'failed', 'still failed')
  t.ok(a.upstream_events.some((e: any) => e.source === 'late' && e.state === 'succeeded'), 'the late success is recorded for the operator')
  t.ok(a.upstream_events.some((e: any) => e.source === 'deadline'), 'the deadline is in the history')
})

t.test('upstream 429 at creation: the job is charged and queued, then submitted after Retry-After', async (t) => {
  fal.fault({ route: 'submit', status: 429, retryAfter: '1' })
  fal.plan({ steps: ['running'], outcome: 'succeeded', media: 'png', finishAfterMs: 100 })
  const t0 = Date.now()
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'rate limited' } })
  t.equal(r.status, 201, r.text)
  t.equal(r.body.status, 'queued', '429: queued, not 502')
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 8000, everyMs: 50 })
  t.equal(job.status, 'completed')
  const sub = [...fal.jobs.values()].find(j => j.input.prompt === 'rate limited')!
  t.ok(sub.createdAt - t0 >= 950, `resubmitted after Retry-After (${sub.createdAt - t0} ms)`)
  const a = await admin(r.body.id)
  t.ok(a.upstream_events.some((e: any) => e.state === 'rate_limited'), 'the 429 is in the history')
})

t.test('the callback route: unknown provider 404, unverifiable body 401', async (t) => {
  const r1 = await s.req('POST', '/v1/providers/nope/callback', { raw: '{}' })
  t.equal(r1.status, 404)
  const r2 = await s.req('POST', '/v1/providers/replicate/callback', { raw: '{"id":"x"}', headers: { 'content-type': 'application/json' } })
  t.equal(r2.status, 401)
  t.equal(r2.body.code, 'CALLBACK_UNVERIFIED')
})

t.test('ledger after all of it: no double charge, no double refund, nothing stuck', async (t) => {
  // Every job from the tests above settles (nothing stuck) before the ledger is read.
  const stuck = await settled(() => sql`SELECT id, status FROM jobs WHERE status IN ('queued', 'submitted', 'processing')`, rows => rows.length === 0)
  t.same(stuck, [], 'nothing stuck')
  const drift = await sql`
    SELECT a.id FROM accounts a LEFT JOIN credit_entries e ON e.account_id = a.id
    GROUP BY a.id HAVING a.credits <> coalesce(sum(e.delta), 0)`
  t.same(drift, [], 'credits = sum(entries)')
  const charges = await sql`
    SELECT j.id FROM jobs j LEFT JOIN credit_entries e ON e.job_id = j.id AND e.kind = 'charge'
    GROUP BY j.id HAVING count(e.id) <> 1 OR coalesce(sum(e.delta), 0) <> -j.credits_charged`
  t.same(charges, [], 'exactly one charge per job')
  const refunds = await sql`
    SELECT j.id FROM jobs j LEFT JOIN credit_entries e ON e.job_id = j.id AND e.kind = 'refund'
    GROUP BY j.id
    HAVING (j.status IN ('failed', 'cancelled') AND (count(e.id) <> 1 OR coalesce(sum(e.delta), 0) <> j.credits_charged))
        OR (j.status NOT IN ('failed', 'cancelled') AND count(e.id) <> 0)`
  t.same(refunds, [], 'exactly one refund per failed/cancelled job, none otherwise')
  const [{ n }] = await sql`SELECT count(*)::int AS n FROM jobs`
  t.ok(n >= 6, `${n} jobs checked`)
})
