// The Replicate predictions adapter (src/providers/replicate.ts) against the Replicate contract
// stub (test/fixtures/replicate-stub.ts), and its Standard Webhooks verification against the
// specification's published test vector.
import t from 'tap'
import { ReplicateAdapter, replicateOutputs, versionOf } from '../../src/providers/replicate.js'
import { UpstreamRefused, UpstreamUnavailable } from '../../src/providers/upstream.js'
import { ReplicateStub, startReplicateStub } from '../fixtures/replicate-stub.js'
import { startSink, type Sink } from './callback-sink.js'

let rep: ReplicateStub
let sink: Sink
t.before(async () => { rep = await startReplicateStub(); sink = await startSink() })
t.teardown(async () => { await rep.close(); await sink.close() })

const adapter = (over: Partial<ConstructorParameters<typeof ReplicateAdapter>[0]> = {}) =>
  new ReplicateAdapter({ token: rep.token, apiUrl: rep.url, webhookSecret: rep.secret, timeoutMs: 2000, ...over })
const req = (model = 'google/veo-3-fast', callbackUrl: string | null = null) => ({ jobId: 'job_1', model, input: { prompt: 'a red fox', duration: 5 }, callbackUrl })

async function callbackOf (id: string, opts: Parameters<ReplicateStub['deliver']>[1] = {}) {
  const n = sink.received.length
  await rep.deliver(id, { url: sink.url(), ...opts })
  return sink.received[n].raw
}

t.test('submit on a model posts to /v1/models/{owner}/{name}/predictions with Bearer auth, input, webhook and the completed filter', async (t) => {
  const cb = 'https://svc.example/v1/providers/replicate/callback'
  const h = await adapter().submit(req('google/veo-3-fast', cb))
  const sent = rep.requests.filter(r => r.route === 'submit').at(-1)!
  t.equal(sent.path, '/v1/models/google/veo-3-fast/predictions')
  t.equal(sent.authorization, `Bearer ${rep.token}`)
  t.same(JSON.parse(sent.body), { input: { prompt: 'a red fox', duration: 5 }, webhook: cb, webhook_events_filter: ['completed'] })
  t.equal(h.model, 'google/veo-3-fast')
  t.ok(rep.jobs.has(h.id))
  await adapter().submit(req())
  t.same(JSON.parse(rep.requests.filter(r => r.route === 'submit').at(-1)!.body), { input: { prompt: 'a red fox', duration: 5 } }, 'no callback URL: no webhook fields')
})

t.test('a model with ":" or a 64-hex id is a version: POST /v1/predictions with version', async (t) => {
  const hex = 'a'.repeat(64)
  t.equal(versionOf(hex), hex)
  t.equal(versionOf('owner/name:abc123'), 'abc123')
  t.equal(versionOf('owner/name'), null)
  rep.versions.set(hex, 'google/veo-3-fast') // a version the stub knows (an unknown one is a 422)
  await adapter().submit(req(`google/veo-3-fast:${hex}`))
  let sent = rep.requests.filter(r => r.route === 'submit').at(-1)!
  t.equal(sent.path, '/v1/predictions')
  t.equal(JSON.parse(sent.body).version, hex)
  await adapter().submit(req(hex))
  sent = rep.requests.filter(r => r.route === 'submit').at(-1)!
  t.equal(sent.path, '/v1/predictions')
  t.equal(JSON.parse(sent.body).version, hex)
  t.type(await adapter().submit(req('just-a-name')).catch(e => e), UpstreamRefused, 'neither owner/name nor a version: refused before any request')
})

t.test('status: starting -> processing (progress from logs) -> succeeded; output URL or array of URLs', async (t) => {
  const a = adapter()
  rep.plan({ steps: ['queued', 'running', 45], media: 'mp4' })
  const h = await a.submit(req())
  t.same(await a.status(h), { state: 'queued' })
  t.same(await a.status(h), { state: 'running' })
  t.same(await a.status(h), { state: 'running', progress: 45 }, 'from the tqdm line in logs')
  const done = await a.status(h)
  t.equal(done.state, 'succeeded')
  const res = await fetch((done as any).outputs[0])
  t.equal(res.headers.get('content-type'), 'video/mp4')
  await res.arrayBuffer()
  rep.plan({ steps: [], media: 'png' })
  const img = await a.status(await a.submit(req('xai/grok-imagine-image')))
  t.match((img as any).outputs[0], /\.png$/, 'array output')
  t.same(replicateOutputs(['https://x/1.png', 'https://x/2.png']), ['https://x/1.png', 'https://x/2.png'])
  t.same(replicateOutputs({ video: 'https://x/v.mp4', audio: 'https://x/a.mp3' }), ['https://x/v.mp4', 'https://x/a.mp3'])
  t.same(replicateOutputs('not a url'), [])
  t.same(replicateOutputs(null), [])
})

t.test('failed with E005 / NSFW text is a content-policy failure; other errors are not; canceled and aborted are terminal; unknown status is running', async (t) => {
  const a = adapter()
  rep.plan({ steps: [], outcome: 'content_policy' })
  const p = await a.status(await a.submit(req()))
  t.equal(p.state, 'failed')
  t.equal((p as any).contentPolicy, true)
  t.match((p as any).reason, /E005/)
  rep.plan({ steps: [], outcome: 'failed', error: 'NSFW content detected. Try running it again, or try a different prompt.' })
  t.equal(((await a.status(await a.submit(req()))) as any).contentPolicy, true)
  rep.plan({ steps: [], outcome: 'failed' })
  t.same(await a.status(await a.submit(req())), { state: 'failed', reason: 'Prediction failed: CUDA out of memory', contentPolicy: false })
  rep.plan({ steps: ['queued', 'booting', 'aborted'] })
  const h = await a.submit(req())
  t.same(await a.status(h), { state: 'queued' })
  t.same(await a.status(h), { state: 'running' }, 'unknown "booting" -> running')
  t.same(await a.status(h), { state: 'failed', reason: 'replicate: prediction aborted before it started', contentPolicy: false })
  rep.plan({ steps: [], media: 'mp4' })
  const h2 = await a.submit(req())
  rep.fault({ route: 'status', status: 200, body: { id: h2.id, status: 'succeeded', output: null } })
  t.same(await a.status(h2), { state: 'failed', reason: 'replicate: output has no media URL', contentPolicy: false })
})

t.test('cancel: POST .../cancel; true while running (then canceled), false once it ended otherwise; 5xx indefinite', async (t) => {
  const a = adapter()
  rep.plan({ steps: ['queued', 'running', 'running'] })
  const h = await a.submit(req())
  await a.status(h)
  t.equal(await a.cancel(h), true)
  t.equal(rep.requests.filter(r => r.route === 'cancel').at(-1)!.path, `/v1/predictions/${h.id}/cancel`)
  t.same(await a.status(h), { state: 'canceled' })
  t.equal(await a.cancel(h), true, 'already canceled: confirmed')
  rep.plan({ steps: [] })
  const h2 = await a.submit(req())
  await a.status(h2)
  t.equal(await a.cancel(h2), false, 'succeeded before the cancel')
  t.equal(await a.cancel({ id: 'missing', model: 'x/y' }), false, '404')
  rep.fault({ route: 'cancel', status: 502 })
  t.type(await a.cancel(h2).catch(e => e), UpstreamUnavailable)
})

t.test('error mapping: 429 Retry-After and 5xx and timeouts indefinite; 401, 404, 422 refused', async (t) => {
  const a = adapter({ timeoutMs: 300 })
  rep.fault({ route: 'submit', status: 429, retryAfter: '12', body: { title: 'Request was throttled.', detail: 'Expected available in 12 seconds.', status: 429 } })
  const e = await a.submit(req()).catch(e => e)
  t.type(e, UpstreamUnavailable)
  t.equal(e.retryAfterMs, 12_000)
  t.match(e.message, /Expected available in 12 seconds/)
  for (const status of [500, 503, 408]) {
    rep.fault({ route: 'submit', status })
    t.type(await a.submit(req()).catch(e => e), UpstreamUnavailable, `${status}`)
  }
  rep.fault({ route: 'submit', delayMs: 1000 })
  t.type(await a.submit(req()).catch(e => e), UpstreamUnavailable, 'slow answer')
  const e401 = await adapter({ token: 'bad' }).submit(req()).catch(e => e)
  t.type(e401, UpstreamRefused)
  t.match(e401.message, /valid authentication token/)
  rep.missingModels.add('nobody/nothing')
  const e404 = await a.submit(req('nobody/nothing')).catch(e => e)
  t.type(e404, UpstreamRefused)
  t.equal(e404.httpStatus, 404)
  rep.fault({ route: 'submit', status: 422, body: { title: 'Input validation failed', detail: '- input.duration: Must be less than or equal to 10', status: 422 } })
  const e422 = await a.submit(req()).catch(e => e)
  t.type(e422, UpstreamRefused)
  t.match(e422.message, /duration/)
  rep.fault({ route: 'submit', status: 201, body: { status: 'starting' } })
  t.type(await a.submit(req()).catch(e => e), UpstreamUnavailable, '201 without an id: indefinite')
  const h = await a.submit(req())
  for (const status of [500, 404, 429]) {
    rep.fault({ route: 'status', status })
    t.type(await a.status(h).catch(e => e), UpstreamUnavailable, `status ${status}: not a verdict`)
  }
})

t.test('callbacks: the webhook on completion verifies (Standard Webhooks) and carries the state', async (t) => {
  const a = adapter()
  rep.plan({ steps: [], media: 'mp4' })
  const h = await a.submit(req('google/veo-3-fast', sink.url()))
  await a.status(h) // ends the job: the stub sends the webhook
  await rep.waitFor(() => rep.callbacks.some(c => c.jobId === h.id), 5000, 'webhook')
  const raw = sink.received.at(-1)!.raw
  t.equal(raw.headers['webhook-id'], `msg_${h.id}`)
  const v = await a.verifyCallback(raw)
  t.same(v, { ok: true, upstreamId: h.id, state: { state: 'succeeded', outputs: rep.jobs.get(h.id)!.outputs } })
  rep.plan({ steps: [], outcome: 'content_policy', callback: false })
  const h2 = await a.submit(req('google/veo-3-fast', sink.url()))
  rep.finish(h2.id)
  const v2 = await a.verifyCallback(await callbackOf(h2.id))
  t.equal((v2 as any).state.contentPolicy, true)
})

t.test('callbacks: tampered body, stale/future timestamp, wrong secret, missing headers, no configured secret are refused', async (t) => {
  const a = adapter()
  rep.plan({ steps: [], callback: false })
  const h = await a.submit(req('google/veo-3-fast', sink.url()))
  rep.finish(h.id)
  const good = await callbackOf(h.id)
  t.equal((await a.verifyCallback(good)).ok, true)
  const tampered = await a.verifyCallback(await callbackOf(h.id, { tamper: b => b.replace('"succeeded"', '"failed"') }))
  t.equal(tampered.ok, false)
  t.match((tampered as any).reason, /No matching signature/)
  t.equal((await a.verifyCallback({ ...good, body: Buffer.from(good.body.toString() + ' ') })).ok, false, 'replayed headers, body changed by one byte')
  const stale = await a.verifyCallback(await callbackOf(h.id, { timestampOffsetS: -301 }))
  t.equal(stale.ok, false)
  t.match((stale as any).reason, /too old/)
  t.equal((await a.verifyCallback(await callbackOf(h.id, { timestampOffsetS: 301 }))).ok, false, 'too new')
  t.equal((await a.verifyCallback(await callbackOf(h.id, { timestampOffsetS: -280 }))).ok, true, 'inside 300 s')
  t.equal((await a.verifyCallback(await callbackOf(h.id, { wrongKey: true }))).ok, false, 'wrong secret')
  t.equal((await a.verifyCallback({ ...good, headers: { ...good.headers, 'webhook-id': 'msg_other' } })).ok, false, 'signature bound to webhook-id')
  for (const k of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) {
    const headers = { ...good.headers }
    delete headers[k]
    t.equal((await a.verifyCallback({ ...good, headers })).ok, false, `without ${k}`)
  }
  t.same(await adapter({ webhookSecret: undefined }).verifyCallback(good), { ok: false, reason: 'REPLICATE_WEBHOOK_SECRET is not configured' })
  t.equal((await a.verifyCallback({ ...good, body: Buffer.from('[]') })).ok, false)
})

t.test('Standard Webhooks published test vector: the adapter verifies it, the stub signs it identically, a wrong one is refused', async (t) => {
  // standard-webhooks/standard-webhooks spec and reference libraries' tests.
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
  const id = 'msg_p5jXN8AQM9LWM0D4loKWxJek'
  const ts = 1614265330
  const body = '{"test": 2432232314}'
  const expected = 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE='
  const stub = new ReplicateStub({ secret })
  t.equal(stub.signCallback({ id: 'p5jXN8AQM9LWM0D4loKWxJek' } as any, body, ts, false)['webhook-signature'], expected, 'the stub\'s hand-written signer reproduces the vector')

  const a = new ReplicateAdapter({ token: 't', webhookSecret: secret })
  const raw = (sig: string, b = body, msgId = id, at = ts) => ({ headers: { 'webhook-id': msgId, 'webhook-timestamp': String(at), 'webhook-signature': sig }, query: '', body: Buffer.from(b) })
  const realNow = Date.now
  try {
    Date.now = () => ts * 1000 + 10_000 // the vector's time (the library reads the clock itself)
    // The vector's body has no prediction id: verified, then refused for that reason only.
    t.same(await a.verifyCallback(raw(expected)), { ok: false, reason: 'verified body has no prediction id' })
    t.same(await a.verifyCallback(raw(`v1,bm9wZQ== ${expected}`)), { ok: false, reason: 'verified body has no prediction id' }, 'several signatures: one matching is enough')
    t.same(await a.verifyCallback(raw(`v1a,${expected.slice(3)}`)), { ok: false, reason: 'standard webhooks: No matching signature found' }, 'another scheme is not v1')
    t.same(await a.verifyCallback(raw(expected, '{"test": 2432232315}')), { ok: false, reason: 'standard webhooks: No matching signature found' })
    t.same(await a.verifyCallback(raw(expected, body, 'msg_other')), { ok: false, reason: 'standard webhooks: No matching signature found' })
    t.same(await a.verifyCallback(raw('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE')), { ok: false, reason: 'standard webhooks: No matching signature found' }, 'truncated')
    Date.now = () => (ts + 301) * 1000
    t.same(await a.verifyCallback(raw(expected)), { ok: false, reason: 'standard webhooks: Message timestamp too old' }, 'the vector 301 s later')
  } finally {
    Date.now = realNow
  }
  // A prediction body signed the same way verifies and names the prediction.
  const pred = JSON.stringify({ id: 'p1', status: 'succeeded', output: ['https://r/x.png'] })
  const now = Math.floor(Date.now() / 1000)
  const sig = stub.signCallback({ id: 'x1' } as any, pred, now, false)
  t.same(await a.verifyCallback({ headers: sig, query: '', body: Buffer.from(pred) }), { ok: true, upstreamId: 'p1', state: { state: 'succeeded', outputs: ['https://r/x.png'] } })
})

t.test('strict stub: a model without a schema is a 404; an input the schema refuses is a 422 with invalid_fields; an unknown version is a 422', async (t) => {
  const a = adapter()
  const e404 = await a.submit(req('nobody/no-schema')).catch(e => e)
  t.type(e404, UpstreamRefused)
  t.equal(e404.httpStatus, 404)
  const n = rep.jobs.size
  // veo-3.1 takes duration 4/6/8 and resolution 720p/1080p.
  const res = await fetch(`${rep.url}/v1/models/google/veo-3.1/predictions`, {
    method: 'POST', headers: { authorization: `Bearer ${rep.token}`, 'content-type': 'application/json' }, body: JSON.stringify({ input: { prompt: 'p', duration: 15, resolution: '4k' } }),
  })
  t.equal(res.status, 422)
  const body = await res.json() as { invalid_fields: Array<{ type: string; field: string }>; detail: string }
  t.same(body.invalid_fields.map(f => [f.field, f.type]).sort(), [['input.duration', 'enum'], ['input.resolution', 'enum']])
  t.match(body.detail, /- input\.duration: /)
  const e422 = await a.submit({ jobId: 'j', model: 'google/veo-3.1', input: { duration: 8 }, callbackUrl: null }).catch(e => e)
  t.type(e422, UpstreamRefused, 'prompt is required')
  t.equal(e422.httpStatus, 422)
  t.equal(rep.jobs.size, n, 'no prediction was made for a refused input')
  t.equal((await a.submit(req(`${'b'.repeat(64)}`)).catch(e => e)).httpStatus, 422, 'a version the stub does not know')
  const ok = await a.submit({ jobId: 'j', model: 'google/veo-3.1', input: { prompt: 'p', duration: 8, resolution: '1080p' }, callbackUrl: null })
  t.ok(rep.jobs.get(ok.id))
})

t.test('find: the prediction list since the submission; our job id in the webhook is the match, else the same model and input', async (t) => {
  const a = adapter()
  t.equal(a.lookup, 'list')
  const since = new Date(Date.now() - 60_000)
  const cb = (job: string) => `https://svc.example/v1/providers/replicate/callback?job=${job}`
  const mine = await a.submit({ ...req('google/veo-3-fast', cb('job_R')), jobId: 'job_R' })
  await a.submit({ ...req('google/veo-3-fast', cb('job_S')), jobId: 'job_S' }) // same input, another job
  const found = await a.find({ jobId: 'job_R', model: 'google/veo-3-fast', input: req().input, callbackUrl: cb('job_R'), since })
  t.same(found.map(f => f.id), [mine.id], 'matched by the job id in the webhook, not by the (equal) input')
  const listed = rep.requests.filter(r => r.route === 'list').at(-1)!
  t.equal(new URL(listed.path, rep.url).searchParams.get('created_after'), since.toISOString())
  // Polling only (no webhook): the same model and input.
  const input = { prompt: `no webhook ${Math.random()}`, duration: 5 }
  const polled = await a.submit({ jobId: 'job_P', model: 'google/veo-3-fast', input, callbackUrl: null })
  t.same((await a.find({ jobId: 'job_P', model: 'google/veo-3-fast', input, callbackUrl: null, since })).map(f => f.id), [polled.id])
  t.same(await a.find({ jobId: 'job_P', model: 'google/veo-3-fast', input: { prompt: 'never sent' }, callbackUrl: null, since }), [])
  t.same((await a.find({ jobId: 'job_R', model: 'google/veo-3-fast', input: req().input, callbackUrl: cb('job_R'), since, candidate: mine.id })).map(f => f.id), [mine.id], 'a candidate is checked the same way')
  t.same(await a.find({ jobId: 'job_S', model: 'google/veo-3-fast', input: req().input, callbackUrl: cb('job_S'), since, candidate: mine.id }), [], 'another job\'s prediction is not a match')
  // More than a page: the cursor is followed.
  for (let i = 0; i < 101; i++) await a.submit({ jobId: `job_bulk${i}`, model: 'google/veo-3-fast', input: { prompt: `bulk ${i}`, duration: 5 }, callbackUrl: null })
  t.same((await a.find({ jobId: 'job_R', model: 'google/veo-3-fast', input: req().input, callbackUrl: cb('job_R'), since })).map(f => f.id), [mine.id], 'found past the first page')
  rep.fault({ route: 'list', status: 502 })
  t.type(await a.find({ jobId: 'job_R', model: 'google/veo-3-fast', input: req().input, callbackUrl: cb('job_R'), since }).catch(e => e), UpstreamUnavailable)
})
