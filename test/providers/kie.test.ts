// The Kie.ai market task adapter (src/providers/kie.ts) against the Kie contract stub (test/fixtures/kie-stub.ts).
import { createHmac } from 'node:crypto'
import t from 'tap'
import { KieAdapter, kieOutputs } from '../../src/providers/kie.js'
import { UpstreamRefused, UpstreamUnavailable } from '../../src/providers/upstream.js'
import { startKieStub, type KieStub } from '../fixtures/kie-stub.js'
import { startSink, type Sink } from './callback-sink.js'

let kie: KieStub
let sink: Sink
t.before(async () => { kie = await startKieStub(); sink = await startSink() })
t.teardown(async () => { await kie.close(); await sink.close() })

const adapter = (over: Partial<ConstructorParameters<typeof KieAdapter>[0]> = {}) =>
  new KieAdapter({ apiKey: kie.key, apiUrl: kie.url, hmacKey: kie.hmacKey, timeoutMs: 2000, ...over })
const req = (model = 'bytedance/v1-pro-text-to-video', callbackUrl: string | null = null) => ({ jobId: 'job_1', model, input: { prompt: 'a red fox', aspect_ratio: '16:9' }, callbackUrl })

async function callbackOf (id: string, opts: Parameters<KieStub['deliver']>[1] = {}) {
  const n = sink.received.length
  await kie.deliver(id, { url: sink.url(), ...opts })
  return sink.received[n].raw
}

t.test('submit posts {model, input, callBackUrl} to /api/v1/jobs/createTask with Bearer auth and keeps data.taskId', async (t) => {
  const cb = 'https://svc.example/v1/providers/kie/callback'
  const h = await adapter().submit(req('bytedance/v1-pro-text-to-video', cb))
  const sent = kie.requests.filter(r => r.route === 'submit').at(-1)!
  t.equal(sent.authorization, `Bearer ${kie.key}`)
  t.same(JSON.parse(sent.body), { model: 'bytedance/v1-pro-text-to-video', input: { prompt: 'a red fox', aspect_ratio: '16:9' }, callBackUrl: cb })
  t.match(h.id, /^task_/)
  t.equal(kie.jobs.get(h.id)!.callbackUrl, cb)
  await adapter().submit(req())
  t.notOk('callBackUrl' in JSON.parse(kie.requests.filter(r => r.route === 'submit').at(-1)!.body), 'polling only: no callBackUrl')
})

t.test('recordInfo: waiting -> generating (progress) -> success with resultJson.resultUrls; the URL serves the file until it expires', async (t) => {
  const a = adapter()
  kie.plan({ steps: ['queued', 'running', 30], media: 'png' })
  const h = await a.submit(req('google/nano-banana'))
  t.same(await a.status(h), { state: 'queued' })
  t.same(await a.status(h), { state: 'running' })
  t.same(await a.status(h), { state: 'running', progress: 30 })
  const done = await a.status(h)
  t.equal(done.state, 'succeeded')
  const url = (done as any).outputs[0]
  t.equal(kie.requests.filter(r => r.route === 'status').at(-1)!.path, `/api/v1/jobs/recordInfo?taskId=${h.id}`)
  const res = await fetch(url)
  t.equal(res.headers.get('content-type'), 'image/png')
  t.same(Buffer.from(await res.arrayBuffer()).subarray(1, 4).toString('latin1'), 'PNG')
  kie.expireMedia()
  t.equal((await fetch(url)).status, 404)
  t.same(kieOutputs('{"resultUrls":["https://k/a.mp4","https://k/b.mp4"]}'), ['https://k/a.mp4', 'https://k/b.mp4'])
  t.same(kieOutputs({ resultUrls: ['https://k/a.mp4'] }), ['https://k/a.mp4'])
  t.same(kieOutputs('not json'), [])
  t.same(kieOutputs(''), [])
})

t.test('fail: failCode/failMsg as the reason; content-policy text sets the flag; unknown state is running; success without URLs fails', async (t) => {
  const a = adapter()
  kie.plan({ steps: [], outcome: 'failed' })
  t.same(await a.status(await a.submit(req())), { state: 'failed', reason: 'failCode 500: Internal error, please try again later.', contentPolicy: false })
  kie.plan({ steps: [], outcome: 'content_policy' })
  const p = await a.status(await a.submit(req()))
  t.equal((p as any).contentPolicy, true)
  t.match((p as any).reason, /failCode 400: .*content policies/)
  kie.plan({ steps: ['queuing', 'rendering'] })
  const h = await a.submit(req())
  t.same(await a.status(h), { state: 'queued' }, 'queuing')
  t.same(await a.status(h), { state: 'running' }, 'unknown "rendering" -> running')
  const h2 = await a.submit(req())
  kie.fault({ route: 'status', status: 200, body: { code: 200, message: 'success', data: { taskId: h2.id, state: 'success', resultJson: '{"resultUrls":[]}' } } })
  t.same(await a.status(h2), { state: 'failed', reason: 'kie: resultJson has no resultUrls', contentPolicy: false })
})

t.test('cancel resolves false (Kie has no cancel API) and sends nothing', async (t) => {
  const a = adapter()
  const h = await a.submit(req())
  const n = kie.requests.length
  t.equal(await a.cancel(h), false)
  t.equal(kie.requests.length, n)
})

t.test('createTask body codes: 401/402/404/422/433/501/505 refused; 429/455/500 indefinite; HTTP 5xx/429/timeouts indefinite', async (t) => {
  const a = adapter({ timeoutMs: 300 })
  const e401 = await adapter({ apiKey: 'bad' }).submit(req()).catch(e => e)
  t.type(e401, UpstreamRefused, 'bad key (HTTP 200, code 401)')
  t.equal(e401.httpStatus, 401)
  for (const code of [402, 404, 422, 433, 501, 505]) {
    kie.fault({ route: 'submit', status: 200, body: { code, msg: `stub code ${code}` } })
    const e = await a.submit(req()).catch(e => e)
    t.type(e, UpstreamRefused, `code ${code}`)
    t.match(e.message, `code ${code}`)
  }
  for (const code of [429, 455, 500]) {
    kie.fault({ route: 'submit', status: 200, body: { code, msg: `stub code ${code}` } })
    t.type(await a.submit(req()).catch(e => e), UpstreamUnavailable, `code ${code}`)
  }
  kie.fault({ route: 'submit', status: 429, retryAfter: '4' })
  const e429 = await a.submit(req()).catch(e => e)
  t.type(e429, UpstreamUnavailable)
  t.equal(e429.retryAfterMs, 4000)
  kie.fault({ route: 'submit', status: 502 })
  t.type(await a.submit(req()).catch(e => e), UpstreamUnavailable, 'HTTP 502')
  kie.fault({ route: 'submit', status: 403, body: { code: 403, msg: 'forbidden' } })
  t.type(await a.submit(req()).catch(e => e), UpstreamRefused, 'HTTP 403')
  kie.fault({ route: 'submit', delayMs: 1000 })
  t.type(await a.submit(req()).catch(e => e), UpstreamUnavailable, 'slow')
  kie.fault({ route: 'submit', status: 200, body: { code: 200, msg: 'success', data: {} } })
  t.type(await a.submit(req()).catch(e => e), UpstreamUnavailable, 'accepted without a taskId')
  kie.fault({ route: 'submit', status: 200, body: '<html>maintenance</html>' })
  t.type(await a.submit(req()).catch(e => e), UpstreamUnavailable, 'no JSON')
  const h = await a.submit(req())
  kie.fault({ route: 'status', status: 200, body: { code: 500, msg: 'server busy' } })
  t.type(await a.status(h).catch(e => e), UpstreamUnavailable, 'recordInfo code 500: not a verdict')
  kie.fault({ route: 'status', status: 503 })
  t.type(await a.status(h).catch(e => e), UpstreamUnavailable, 'recordInfo HTTP 503')
  t.type(await a.status({ id: 'task_unknown', model: 'm' }).catch(e => e), UpstreamUnavailable, 'unknown task: not a verdict')
})

t.test('callbacks: a verified callback names the task but carries no state (the HMAC does not cover the body)', async (t) => {
  const a = adapter()
  kie.plan({ steps: [], media: 'mp4' })
  const h = await a.submit(req('bytedance/v1-pro-text-to-video', sink.url()))
  await a.status(h) // ends it: the stub calls back
  await kie.waitFor(() => kie.callbacks.some(c => c.jobId === h.id), 5000, 'callback')
  const raw = sink.received.at(-1)!.raw
  t.equal(JSON.parse(raw.body.toString()).data.state, 'success', 'the body says success...')
  t.same(await a.verifyCallback(raw), { ok: true, upstreamId: h.id }, '...but the verdict has no state: a hint to confirm with status')
  // The body is not covered: a changed body still verifies, which is exactly why it carries no state.
  const forgedBody = await callbackOf(h.id, { tamper: b => b.replace('"success"', '"fail"') })
  t.same(await a.verifyCallback(forgedBody), { ok: true, upstreamId: h.id })
})

t.test('callbacks: wrong key, stale/future timestamp, another task id, missing headers, no configured key are refused', async (t) => {
  const a = adapter()
  kie.plan({ steps: [], callback: false })
  const h = await a.submit(req('bytedance/v1-pro-text-to-video', sink.url()))
  kie.finish(h.id)
  const good = await callbackOf(h.id)
  t.equal((await a.verifyCallback(good)).ok, true)
  t.same(await a.verifyCallback(await callbackOf(h.id, { wrongKey: true })), { ok: false, reason: 'signature does not match' })
  t.same(await a.verifyCallback(await callbackOf(h.id, { timestampOffsetS: -301 })), { ok: false, reason: 'timestamp outside 300 s' })
  t.equal((await a.verifyCallback(await callbackOf(h.id, { timestampOffsetS: 301 }))).ok, false)
  const other = await a.verifyCallback({ ...good, body: Buffer.from(good.body.toString().replaceAll(h.id, 'task_someone_else')) })
  t.same(other, { ok: false, reason: 'signature does not match' }, 'the signature is bound to the task id: it cannot be moved to another task')
  t.same(await a.verifyCallback({ ...good, headers: { ...good.headers, 'x-webhook-timestamp': String(Number(good.headers['x-webhook-timestamp']) - 1) } }), { ok: false, reason: 'signature does not match' }, 'bound to the timestamp')
  for (const k of ['x-webhook-timestamp', 'x-webhook-signature']) {
    const headers = { ...good.headers }
    delete headers[k]
    t.equal((await a.verifyCallback({ ...good, headers })).ok, false, `without ${k}`)
  }
  t.same(await a.verifyCallback({ ...good, body: Buffer.from('not json') }), { ok: false, reason: 'body is not JSON' })
  t.same(await adapter({ hmacKey: undefined }).verifyCallback(good), { ok: false, reason: 'KIE_WEBHOOK_HMAC_KEY is not configured' })
  // Independent of the stub: Kie's documented recipe base64(HMAC-SHA256(taskId + "." + timestamp)).
  const ts = String(Math.floor(Date.now() / 1000))
  const sig = createHmac('sha256', 'k3y').update(`task_abc.${ts}`).digest('base64')
  t.same(await new KieAdapter({ apiKey: 'x', hmacKey: 'k3y' }).verifyCallback({ headers: { 'x-webhook-timestamp': ts, 'x-webhook-signature': sig }, query: '', body: Buffer.from('{"code":200,"data":{"taskId":"task_abc","state":"success"}}') }), { ok: true, upstreamId: 'task_abc' })
})

t.test('strict stub: an unknown model is code 404, an input the schema refuses code 422 (no task made); an unverified schema without fields takes anything', async (t) => {
  const a = adapter()
  const e404 = await a.submit(req('nobody/no-model')).catch(e => e)
  t.type(e404, UpstreamRefused)
  t.equal(e404.httpStatus, 404)
  const n = kie.jobs.size
  const e422 = await a.submit({ jobId: 'j', model: 'grok-imagine/text-to-video', input: { prompt: 'p', resolution: '1080p' }, callbackUrl: null }).catch(e => e)
  t.type(e422, UpstreamRefused)
  t.equal(e422.httpStatus, 422)
  t.match(e422.message, /resolution: must be one of "480p", "720p"/)
  t.equal(kie.jobs.size, n, 'no task')
  const open = await a.submit({ jobId: 'j', model: 'bytedance/v1-lite-text-to-video', input: { anything: [1, 2], prompt: 3 }, callbackUrl: null })
  t.ok(kie.jobs.get(open.id), 'verified=false with no properties: accepted')
})

t.test('callbacks carrying the task id as data.task_id (Kie\'s verification doc, Runway callbacks) verify as data.taskId ones do', async (t) => {
  const a = adapter()
  kie.plan({ steps: [], media: 'mp4', callback: false })
  const h = await a.submit(req('bytedance/v1-pro-text-to-video', sink.url()))
  await a.status(h)
  kie.taskIdKey = 'task_id'
  try {
    const raw = await callbackOf(h.id)
    const body = JSON.parse(raw.body.toString())
    t.equal(body.data.task_id, h.id, 'the body names the task as task_id')
    t.notOk('taskId' in body.data)
    t.same(await a.verifyCallback(raw), { ok: true, upstreamId: h.id }, 'verified against task_id.timestamp')
    t.same(await a.verifyCallback(await callbackOf(h.id, { wrongKey: true })), { ok: false, reason: 'signature does not match' }, 'still signed over the task id')
    const swapped = await callbackOf(h.id, { tamper: b => b.replaceAll(h.id, 'task_other') })
    t.same(await a.verifyCallback(swapped), { ok: false, reason: 'signature does not match' }, 'another task_id does not verify')
  } finally { kie.taskIdKey = 'taskId' }
  t.same(await a.verifyCallback({ headers: {}, query: '', body: Buffer.from('{}') }).then(v => v.ok), false)
  const { taskIdOf } = await import('../../src/providers/kie.js')
  t.equal(taskIdOf({ data: { task_id: 'a' } }), 'a')
  t.equal(taskIdOf({ data: { taskId: 'b', task_id: 'a' } }), 'b', 'taskId first')
  t.equal(taskIdOf({ taskId: 'c' }), 'c')
  t.equal(taskIdOf({ data: {} }), null)
})

t.test('find: Kie lists no tasks; a candidate a callback named is ours when recordInfo\'s param holds our callBackUrl for the job', async (t) => {
  const a = adapter()
  t.equal(a.lookup, 'callback')
  const cb = 'https://svc.example/v1/providers/kie/callback?job=job_K'
  const h = await a.submit({ ...req('bytedance/v1-pro-text-to-video', cb), jobId: 'job_K' })
  const q = { jobId: 'job_K', model: 'bytedance/v1-pro-text-to-video', input: req().input, callbackUrl: cb, since: new Date(Date.now() - 60_000) }
  const n = kie.requests.length
  t.same(await a.find(q), [], 'without a candidate there is nothing to search')
  t.equal(kie.requests.length, n, 'and nothing is asked')
  t.same(await a.find({ ...q, candidate: h.id }), [{ id: h.id, model: q.model }])
  t.same(await a.find({ ...q, jobId: 'job_other', candidate: h.id }), [], 'a task sent for another job is not this one\'s')
  t.same(await a.find({ ...q, candidate: 'task_unknown' }), [], 'unknown task')
})
