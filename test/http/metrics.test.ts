// GET /metrics (docs/operations.md "Metrics"): Prometheus text behind METRICS_TOKEN or
// ADMIN_TOKEN; after known traffic each counter moved by exactly the traffic's amount, and the
// values measured in worker threads (group commit, providers, webhook deliveries) reach it.
import t from 'tap'
import { startReceiver } from '../fixtures/webhook-receiver.js'
import { ADMIN_TOKEN, createUser, startServer } from '../helpers/server.js'
import { openSse } from '../helpers/sse.js'
import { waitFor } from '../helpers/wait.js'

const METRICS_TOKEN = 'metrics-token-0123456789abcdef'
const rx = await startReceiver()
t.teardown(() => rx.close())

const s = await startServer(t, {
  // veo3-fast (110 s) takes 5.5 s: long enough to hold an SSE stream open on it.
  SIM_SPEED: '20',
  METRICS_TOKEN,
  WEBHOOK_ALLOWLIST: `127.0.0.1:${rx.port}`,
  WEBHOOK_RETRY_SCALE: '0.001',
  TIER_LIMITS: JSON.stringify({ free: { rpm: 100000, max_concurrent: 1000 }, session: { rpm: 3, max_concurrent: 1000 } }),
})

/** Series -> value, e.g. `genjobs_http_requests_total{route="/v1/jobs/:id",method="GET",status="200"}`. */
function parse (text: string): Map<string, number> {
  const m = new Map<string, number>()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const i = line.lastIndexOf(' ')
    m.set(line.slice(0, i), Number(line.slice(i + 1)))
  }
  return m
}

async function scrape (token = ADMIN_TOKEN): Promise<Map<string, number>> {
  const r = await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${token}` } })
  if (r.status !== 200) throw new Error(`metrics: ${r.status}`)
  return parse(await r.text())
}

const until = <T>(what: string, fn: () => Promise<T>, timeoutMs = 15000) => waitFor(fn, { what, timeoutMs, everyMs: 50 })

t.test('GET /metrics without or with a wrong token is 401 in the error envelope', async t => {
  const none = await s.req('GET', '/metrics')
  t.equal(none.status, 401)
  t.equal(none.body.code, 'AUTH_REQUIRED')
  t.equal(none.body.error, true)
  const wrong = await s.req('GET', '/metrics', { headers: { authorization: 'Bearer not-the-token' } })
  t.equal(wrong.status, 401)
  t.equal(wrong.body.code, 'TOKEN_INVALID')
  const key = await s.req('GET', '/metrics', { headers: { authorization: `Bearer ${METRICS_TOKEN}x` } })
  t.equal(key.status, 401, 'a token that only starts like METRICS_TOKEN is refused')
})

t.test('both METRICS_TOKEN and ADMIN_TOKEN read Prometheus text with genjobs_ names', async t => {
  for (const token of [METRICS_TOKEN, ADMIN_TOKEN]) {
    const r = await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${token}` } })
    t.equal(r.status, 200)
    t.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/)
    const text = await r.text()
    for (const name of ['genjobs_http_requests_total', 'genjobs_http_request_duration_seconds', 'genjobs_jobs_created_total', 'genjobs_sse_streams_open', 'genjobs_webhook_deliveries_total', 'genjobs_group_commit_batch_size', 'genjobs_group_commit_seconds', 'genjobs_shard_mailbox_depth', 'genjobs_outbox_lag_seconds', 'genjobs_provider_seconds', 'genjobs_provider_breaker_state', 'genjobs_refusals_total', 'genjobs_jobs']) {
      t.match(text, new RegExp(`^# TYPE ${name} `, 'm'), `${name} is exposed`)
    }
    for (const line of text.split('\n')) {
      if (line && !line.startsWith('#') && !line.startsWith('genjobs_')) t.fail(`series without the genjobs_ prefix: ${line}`)
    }
  }
})

t.test('counters move by exactly the traffic sent', async t => {
  const u = await createUser(s, { credits: 1000 })
  const sessionUser = await createUser(s, { withKey: false })
  const path = '/hook-metrics'
  const secret = 'metrics-hook-secret-0123456789'
  rx.route(path, secret, [500]) // the first delivery fails once, then every answer is 200
  const hook = await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: rx.url(path), events: ['job.completed', 'job.failed'], secret } })
  t.equal(hook.status, 201)

  const before = await scrape()
  const v = (m: Map<string, number>, k: string) => m.get(k) ?? 0
  const diff = (after: Map<string, number>, k: string) => v(after, k) - v(before, k)

  // Two image jobs and one video job; one refused submission ([sim:reject]) creates none.
  const ids: string[] = []
  for (let i = 0; i < 2; i++) {
    const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: `a red apple ${i}` } })
    t.equal(r.status, 201)
    ids.push(r.body.id)
  }
  const vid = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'veo3-fast', prompt: 'a cat surfing', aspect_ratio: '16:9' } })
  t.equal(vid.status, 201)
  const rej = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'apple [sim:reject]' } })
  t.equal(rej.status, 502)
  // Five reads of one job, three unmatched paths.
  for (let i = 0; i < 5; i++) t.equal((await s.req('GET', `/v1/jobs/${ids[0]}`, { key: u.key })).status, 200)
  // Two HEADs of it: their own series, the route's one latency histogram.
  for (let i = 0; i < 2; i++) t.equal((await s.req('HEAD', `/v1/jobs/${ids[0]}`, { key: u.key })).status, 200)
  for (let i = 0; i < 3; i++) t.equal((await s.req('GET', `/nope/${i}`)).status, 404)
  // Session tier here: 3 requests a minute, so 2 of 5 are refused.
  const codes: number[] = []
  for (let i = 0; i < 5; i++) codes.push((await s.req('GET', '/v1/credits', { jwt: sessionUser.jwt })).status)
  t.same(codes, [200, 200, 200, 429, 429])

  // One SSE stream on the running video.
  const stream = await openSse(`${s.url}/v1/sse/jobs/${vid.body.id}`, { 'x-api-key': u.key })
  t.equal(stream.status, 200)
  await stream.waitFor(e => e.event === 'status')
  const open = await scrape()
  t.equal(v(open, 'genjobs_sse_streams_open') - v(before, 'genjobs_sse_streams_open'), 1, 'one SSE stream open')
  t.ok(v(open, 'genjobs_jobs{state="processing"}') + v(open, 'genjobs_jobs{state="submitted"}') >= 1, 'the running video counts as a job in a non-terminal state')
  stream.abort()

  // Both image jobs' deliveries (one retried) and the video's.
  const delivered = await until('webhook deliveries', async () => {
    const m = await scrape()
    return diff(m, 'genjobs_webhook_deliveries_total{outcome="delivered"}') >= 3 && m
  }, 20000)
  // A delivery is counted when its attempt ends; its outbox row is marked in the delivery
  // worker's next commit: wait for both gauges rather than assume the order.
  const after = await until('the SSE gauge back to its level and the outbox drained', async () => {
    const m = await scrape()
    return v(m, 'genjobs_sse_streams_open') === v(before, 'genjobs_sse_streams_open') && v(m, 'genjobs_outbox_pending') === 0 && m
  })

  t.equal(diff(after, 'genjobs_jobs_created_total{type="image",model="nano-banana"}'), 2, 'two image jobs created')
  t.equal(diff(after, 'genjobs_jobs_created_total{type="video",model="veo3-fast"}'), 1, 'one video job created')
  t.equal(diff(after, 'genjobs_http_requests_total{route="/v1/generate/image",method="POST",status="201"}'), 2)
  t.equal(diff(after, 'genjobs_http_requests_total{route="/v1/generate/image",method="POST",status="502"}'), 1)
  t.equal(diff(after, 'genjobs_http_requests_total{route="/v1/jobs/:id",method="GET",status="200"}'), 5, 'five job reads')
  t.equal(diff(after, 'genjobs_http_requests_total{route="unmatched",method="GET",status="404"}'), 3, 'unmatched paths share one series')
  t.equal(diff(after, 'genjobs_http_requests_total{route="/v1/credits",method="GET",status="429"}'), 2)
  t.equal(diff(after, 'genjobs_refusals_total{reason="RATE_LIMIT_EXCEEDED"}'), 2, 'two rate-limit refusals')
  t.equal(diff(after, 'genjobs_http_requests_total{route="/v1/jobs/:id",method="HEAD",status="200"}'), 2, 'two HEADs')
  t.equal(diff(after, 'genjobs_http_request_duration_seconds_count{route="/v1/jobs/:id"}'), 7, 'the latency histogram saw the seven reads')
  t.equal(diff(after, 'genjobs_http_request_duration_seconds_bucket{route="/v1/jobs/:id",le="+Inf"}'), 7)
  t.equal(diff(delivered, 'genjobs_webhook_deliveries_total{outcome="retry"}'), 1, 'the failed first attempt counts as a retry')
  t.equal(diff(after, 'genjobs_webhook_deliveries_total{outcome="delivered"}'), 3, 'three deliveries succeeded')
  t.equal(diff(after, 'genjobs_provider_seconds_count{provider="simulated"}'), 4, 'four provider submissions timed')
  t.equal(diff(after, 'genjobs_provider_errors_total{provider="simulated"}'), 1, 'one refused submission')
  t.equal(v(after, 'genjobs_provider_breaker_state{provider="simulated"}'), 0, 'breaker closed')
  t.ok(diff(after, 'genjobs_group_commit_batch_size_count') >= 3, 'group commits were measured in the shards')
  t.ok(diff(after, 'genjobs_group_commit_seconds_sum') > 0)
  t.ok(diff(after, 'genjobs_jobs_finished_total{status="completed"}') >= 3, 'the three jobs finished')
  t.equal(v(after, 'genjobs_outbox_pending'), 0, 'outbox drained')
  t.equal(v(after, 'genjobs_outbox_lag_seconds'), 0)
  t.type(after.get('genjobs_shard_mailbox_depth'), 'number')
})

/** The series every Prometheus process dashboard starts from (prom-client's defaults, prefixed). */
function assertProcessSeries (t: any, text: string): void {
  const m = parse(text)
  t.ok(val(m, 'genjobs_process_resident_memory_bytes') > 20 * 1024 * 1024, `resident memory ${val(m, 'genjobs_process_resident_memory_bytes')} bytes`)
  t.ok(val(m, 'genjobs_process_cpu_seconds_total') > 0, 'CPU seconds')
  t.ok(val(m, 'genjobs_process_open_fds') > 0, 'open files')
  t.ok(val(m, 'genjobs_process_max_fds') >= val(m, 'genjobs_process_open_fds'), 'file limit')
  t.ok(val(m, 'genjobs_process_start_time_seconds') > 1.6e9, 'start time')
  t.ok(m.has('genjobs_nodejs_eventloop_lag_seconds'), 'event-loop lag of the main thread')
  t.ok(m.has('genjobs_nodejs_eventloop_lag_p99_seconds'))
  t.ok(val(m, 'genjobs_nodejs_heap_size_used_bytes') > 0, 'heap used')
  t.ok([...m.keys()].some(k => k.startsWith('genjobs_nodejs_version_info{')), 'Node.js version')
  for (const name of ['genjobs_process_resident_memory_bytes', 'genjobs_nodejs_eventloop_lag_seconds']) {
    t.equal(text.split('\n').filter(l => l.startsWith(`${name} `)).length, 1, `${name} exposed once`)
  }
  t.notOk(text.split('\n').some(l => l !== '' && !l.startsWith('#') && !l.startsWith('genjobs_')), 'every series starts with genjobs_')
}

function val (m: Map<string, number>, k: string): number { return m.get(k) ?? NaN }

t.test('process and Node.js series: resident memory, CPU seconds, open files, event-loop lag, heap', async t => {
  const r = await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })
  assertProcessSeries(t, await r.text())
})

t.test('with FRONTENDS=2 any front-end thread answers the scrape with the process series once', async t => {
  const two = await startServer(t, { FRONTENDS: '2', METRICS_TOKEN })
  // A new connection each time: the kernel spreads them over both threads (SO_REUSEPORT); a
  // thread other than the main one delegates the scrape, so every answer is the same registry.
  for (let i = 0; i < 6; i++) {
    const r = await fetch(`${two.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}`, connection: 'close' } })
    t.equal(r.status, 200)
    const text = await r.text()
    assertProcessSeries(t, text)
  }
})
