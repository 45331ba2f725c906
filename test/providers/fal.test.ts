// The fal queue adapter (src/providers/fal.ts) against the fal contract stub (test/fixtures/fal-stub.ts).
import t from 'tap'
import { FalAdapter } from '../../src/providers/fal.js'
import { Ed25519Key } from '../../src/providers/ed25519.js'
import { UpstreamRefused, UpstreamUnavailable, type UpstreamHandle } from '../../src/providers/upstream.js'
import { startFalStub, type FalStub } from '../fixtures/fal-stub.js'
import { startSink, type Sink } from './callback-sink.js'

let fal: FalStub
let sink: Sink
t.before(async () => { fal = await startFalStub(); sink = await startSink() })
t.teardown(async () => { await fal.close(); await sink.close() })

function adapter (over: Partial<ConstructorParameters<typeof FalAdapter>[0]> = {}) {
  return new FalAdapter({ key: fal.key, queueUrl: fal.url, jwksUrl: fal.jwksUrl, timeoutMs: 2000, ...over })
}
const req = (model = 'fal-ai/veo3/fast', callbackUrl: string | null = null) => ({ jobId: 'job_1', model, input: { prompt: 'a red fox' }, callbackUrl })

/** Delivers the stub's callback for `id` to the sink and returns what arrived. */
async function callbackOf (id: string, opts: Parameters<FalStub['deliver']>[1] = {}) {
  const n = sink.received.length
  await fal.deliver(id, { url: sink.url(), ...opts })
  return sink.received[n].raw
}

t.test('submit posts the input to /{app} with Key auth and fal_webhook, and keeps the URLs fal answered', async (t) => {
  const a = adapter()
  const cb = 'https://svc.example/v1/providers/fal/callback?x=1'
  const h = await a.submit(req('fal-ai/veo3/fast', cb))
  const sent = fal.requests.find(r => r.route === 'submit' && r.path.startsWith('/fal-ai/veo3/fast'))!
  t.equal(new URL(sent.path, fal.url).searchParams.get('fal_webhook'), cb, 'callback URL in fal_webhook')
  t.equal(sent.authorization, `Key ${fal.key}`)
  t.same(JSON.parse(sent.body), { prompt: 'a red fox' }, 'the body is the upstream input')
  t.equal(fal.jobs.get(h.id)!.callbackUrl, cb)
  // fal builds the URLs on the app's owner/alias, not the submitted path.
  t.equal(h.urls!.status, `${fal.url}/fal-ai/veo3/requests/${h.id}/status`)
  t.equal(h.urls!.response, `${fal.url}/fal-ai/veo3/requests/${h.id}`)
  t.equal(h.urls!.cancel, `${fal.url}/fal-ai/veo3/requests/${h.id}/cancel`)
  const again = await adapter().submit(req('fal-ai/veo3/fast'))
  t.notOk(new URL(fal.requests.filter(r => r.route === 'submit').at(-1)!.path, fal.url).searchParams.has('fal_webhook'), 'no callback URL: no fal_webhook')
  t.not(again.id, h.id)
})

t.test('status walks IN_QUEUE -> IN_PROGRESS (progress from logs) -> COMPLETED with the video URL, which serves an MP4 until it expires', async (t) => {
  const a = adapter()
  fal.plan({ steps: ['queued', 40], outcome: 'succeeded', media: 'mp4' })
  const h = await a.submit(req())
  t.same(await a.status(h), { state: 'queued' })
  t.same(await a.status(h), { state: 'running', progress: 40 })
  const done = await a.status(h)
  t.equal(done.state, 'succeeded')
  const url = (done as any).outputs[0] as string
  t.match(url, /\/media\/[0-9a-f]+\.mp4$/)
  const res = await fetch(url)
  t.equal(res.status, 200)
  t.equal(res.headers.get('content-type'), 'video/mp4')
  t.equal(Buffer.from(await res.arrayBuffer()).subarray(4, 8).toString('latin1'), 'ftyp', 'a real MP4')
  fal.expireMedia([url])
  t.equal((await fetch(url)).status, 404, 'expired upstream URL')
  t.same(await a.status(h), done, 'a finished job keeps answering the same state')
})

t.test('results: images[0].url for images, audio.url for audio; has_nsfw_concepts true is a content-policy failure', async (t) => {
  const a = adapter()
  fal.plan({ steps: [], media: 'png' })
  const img = await a.status(await a.submit(req('fal-ai/nano-banana')))
  t.equal(img.state, 'succeeded')
  t.match((img as any).outputs[0], /\.png$/)
  fal.plan({ steps: [], media: 'mp3' })
  const aud = await a.status(await a.submit(req('fal-ai/elevenlabs/music')))
  t.match((aud as any).outputs[0], /\.mp3$/)
  // A handle the stub does not make: the result is read from response_url.
  const { falOutputs } = await import('../../src/providers/fal.js')
  t.same(falOutputs({ images: [{ url: 'https://x/a.png' }, { url: 'https://x/b.png' }] }), ['https://x/a.png', 'https://x/b.png'])
  t.same(falOutputs({ audio_file: { url: 'https://x/a.wav' } }), ['https://x/a.wav'])
  t.same(falOutputs({ video: { url: 'https://x/v.mp4' }, image: { url: 'https://x/i.png' } }), ['https://x/v.mp4', 'https://x/i.png'], 'video first')
  t.same(falOutputs({ text: 'no media' }), [])
})

t.test('failures: a 422 detail is failed; content_policy_violation sets the flag; the failure on the status itself is read too', async (t) => {
  const a = adapter()
  fal.plan({ steps: [], outcome: 'failed', error: 'Model crashed' })
  const f = await a.status(await a.submit(req()))
  t.same(f, { state: 'failed', reason: 'fal: Model crashed', contentPolicy: false })
  fal.plan({ steps: [], outcome: 'content_policy' })
  const p = await a.status(await a.submit(req()))
  t.equal(p.state, 'failed')
  t.equal((p as any).contentPolicy, true)
  t.match((p as any).reason, /flagged by a content checker/)
  // Newer queue answers: COMPLETED with error/error_type on the status.
  const h = await a.submit(req())
  fal.fault({ route: 'status', status: 200, body: { status: 'COMPLETED', error: 'NSFW output', error_type: 'content_policy_violation' } })
  t.same(await a.status(h), { state: 'failed', reason: 'NSFW output', contentPolicy: true })
})

t.test('failure shapes: COMPLETED carrying error/error_type is a failure, never a success nor a retry', async (t) => {
  const a = adapter()
  fal.plan({ steps: [], outcome: 'failed' })
  const h = await a.submit(req())
  fal.statusError(h.id)
  const st = await a.status(h)
  t.equal(st.state, 'failed')
  t.match((st as any).reason, /the app raised an error/)
  t.notOk(fal.requests.some(r => r.route === 'result' && r.path.includes(h.id)), 'the result URL is not read: the status said it')
  // error_type alone is enough.
  const h2 = await a.submit(req())
  fal.fault({ route: 'status', status: 200, body: { status: 'COMPLETED', error_type: 'internal_server_error' } })
  t.same(await a.status(h2), { state: 'failed', reason: 'internal_server_error', contentPolicy: false })
})

t.test('failure shapes: a 5xx result with X-Fal-Retryable: false is the job\'s failure; without it (or true) it is retried', async (t) => {
  const a = adapter()
  fal.plan({ steps: [] })
  const h = await a.submit(req())
  fal.fault({ route: 'result', status: 500, headers: { 'x-fal-retryable': 'true' }, body: { detail: [{ loc: ['body'], msg: 'Internal server error', type: 'internal_server_error' }] } })
  t.type(await a.status(h).catch(e => e), UpstreamUnavailable, 'retryable 500: unknown, poll again')
  fal.fault({ route: 'result', status: 504, headers: { 'x-fal-retryable': 'false' }, body: { detail: [{ loc: ['body'], msg: 'Generation timed out', type: 'generation_timeout' }] } })
  const st = await a.status(h)
  t.equal(st.state, 'failed', 'not retryable: a definitive failure')
  t.match((st as any).reason, /504 \(X-Fal-Retryable: false\): Generation timed out/)
  t.equal((st as any).inputRefused, undefined)
})

t.test('failure shapes: input the app refuses after the queue took it ends with a 422 result flagged inputRefused (status and callback)', async (t) => {
  const a = adapter()
  // veo3 requires a prompt: the queue takes the request, the app refuses it.
  fal.plan({ steps: [] })
  const h = await a.submit({ jobId: 'job_1', model: 'fal-ai/veo3', input: { aspect_ratio: '16:9' }, callbackUrl: sink.url() })
  const st = await a.status(h)
  t.equal(st.state, 'failed')
  t.equal((st as any).inputRefused, true)
  t.equal((st as any).contentPolicy, false)
  t.match((st as any).reason, /HTTP 422/)
  await fal.waitFor(() => fal.callbacks.some(c => c.jobId === h.id), 5000, 'ERROR callback')
  const v = await a.verifyCallback(sink.received.at(-1)!.raw)
  t.equal((v as any).state.inputRefused, true, 'the ERROR webhook with a validation detail says the same')
})

t.test('409 is retried as fal\'s Python client does: one job, answered after the retry', async (t) => {
  const a = adapter()
  const before = fal.jobs.size
  fal.fault({ route: 'submit', status: 409, times: 2, body: { detail: 'Conflict' } })
  const h = await a.submit(req())
  t.ok(h.id)
  t.equal(fal.jobs.size, before + 1, 'one upstream job')
  fal.fault({ route: 'status', status: 409, body: { detail: 'Conflict' } })
  t.ok(['queued', 'running'].includes((await a.status(h)).state), 'a status call answered 409 is retried too')
  fal.fault({ route: 'submit', status: 409, times: 5, body: { detail: 'Conflict' } })
  const e = await adapter({ conflictAttempts: 3 }).submit(req()).catch(e => e)
  t.type(e, UpstreamUnavailable, 'still 409 after the attempts: indefinite')
  t.equal(e.notCreated, true, 'and nothing was created: sending again cannot duplicate')
  fal.faults.length = 0
})

t.test('cancel of a request in progress is only requested: the app may finish (and bill); the status says how it ended', async (t) => {
  const a = adapter()
  fal.plan({ steps: ['running', 'running', 'running'], onCancel: 'finish' })
  const h = await a.submit(req())
  await a.status(h)
  t.equal(await a.cancel(h), 'requested')
  t.equal((await a.status(h)).state, 'running', 'still running after the cancel')
  await a.status(h)
  t.equal((await a.status(h)).state, 'succeeded', 'the app finished anyway')
  fal.plan({ steps: ['running', 'running'] })
  const h2 = await a.submit(req())
  await a.status(h2)
  t.equal(await a.cancel(h2), 'requested')
  t.same(await a.status(h2), { state: 'canceled' }, 'an app that honours it reads canceled')
})

t.test('find: fal\'s request list by endpoint, matched on the input we sent; a candidate is checked the same way', async (t) => {
  const a = adapter({ apiUrl: fal.url })
  const since = new Date(Date.now() - 60_000)
  const input = { prompt: `lookup ${Math.random()}` }
  const h = await a.submit({ jobId: 'job_L', model: 'fal-ai/veo3', input, callbackUrl: null })
  await a.submit({ jobId: 'job_M', model: 'fal-ai/veo3', input: { prompt: 'another' }, callbackUrl: null })
  const found = await a.find({ jobId: 'job_L', model: 'fal-ai/veo3', input, callbackUrl: null, since })
  t.same(found.map(f => f.id), [h.id], 'only the request with our input')
  const listed = fal.requests.filter(r => r.route === 'requests').at(-1)!
  const q = new URL(listed.path, fal.url).searchParams
  t.equal(q.get('endpoint_id'), 'fal-ai/veo3')
  t.equal(q.get('expand'), 'payloads')
  t.equal(listed.authorization, `Key ${fal.key}`)
  t.same(await a.find({ jobId: 'job_L', model: 'fal-ai/veo3', input: { prompt: 'never sent' }, callbackUrl: null, since }), [])
  t.same((await a.find({ jobId: 'job_L', model: 'fal-ai/veo3', input, callbackUrl: null, since, candidate: h.id })).map(f => f.id), [h.id])
  fal.fault({ route: 'requests', status: 503 })
  t.type(await a.find({ jobId: 'job_L', model: 'fal-ai/veo3', input, callbackUrl: null, since }).catch(e => e), UpstreamUnavailable, 'a list that does not answer cannot tell')
})

t.test('an upstream status the adapter does not know is non-terminal (running)', async (t) => {
  const a = adapter()
  fal.plan({ steps: ['queued', 'WARMING_UP', 'running'] })
  const h = await a.submit(req())
  t.same(await a.status(h), { state: 'queued' })
  t.same(await a.status(h), { state: 'running' }, 'WARMING_UP -> running')
  t.same(await a.status(h), { state: 'running' })
  t.equal((await a.status(h)).state, 'succeeded')
})

t.test('cancel: PUT cancel_url; 202 is "requested" (a queued request then reads canceled); cancel after completion is false', async (t) => {
  const a = adapter()
  fal.plan({ steps: ['queued', 'running', 'running'] })
  const h = await a.submit(req())
  await a.status(h)
  t.equal(await a.cancel(h), 'requested', '202 CANCELLATION_REQUESTED is not a confirmation')
  t.equal(fal.requests.filter(r => r.route === 'cancel').at(-1)!.method, 'PUT')
  t.same(await a.status(h), { state: 'canceled' })
  fal.plan({ steps: [] })
  const h2 = await a.submit(req())
  t.equal((await a.status(h2)).state, 'succeeded')
  t.equal(await a.cancel(h2), false, 'ALREADY_COMPLETED')
  fal.fault({ route: 'cancel', status: 503 })
  t.type(await a.cancel(h2).catch(e => e), UpstreamUnavailable, 'a 5xx on cancel is indefinite')
})

t.test('error mapping: 429 (Retry-After), 408, 5xx, timeout, connection refused and a 2xx without request_id are indefinite; 401/404/422 refusals', async (t) => {
  const a = adapter({ timeoutMs: 300 })
  fal.fault({ route: 'submit', status: 429, retryAfter: '7' })
  const e429 = await a.submit(req()).catch(e => e)
  t.type(e429, UpstreamUnavailable)
  t.equal(e429.httpStatus, 429)
  t.equal(e429.retryAfterMs, 7000)
  fal.fault({ route: 'submit', status: 429, retryAfter: new Date(Date.now() + 60_000).toUTCString() })
  const eDate = await a.submit(req()).catch(e => e)
  t.ok(eDate.retryAfterMs > 55_000 && eDate.retryAfterMs <= 60_000, `Retry-After as an HTTP date: ${eDate.retryAfterMs} ms`)
  for (const status of [408, 500, 502, 503]) {
    fal.fault({ route: 'submit', status })
    const e = await a.submit(req()).catch(e => e)
    t.type(e, UpstreamUnavailable, `${status} is indefinite`)
    t.equal(e.httpStatus, status)
  }
  fal.fault({ route: 'submit', delayMs: 1000 })
  const slow = await a.submit(req()).catch(e => e)
  t.type(slow, UpstreamUnavailable, 'no answer within the timeout')
  t.match(slow.message, /no answer within 300 ms/)
  fal.fault({ route: 'submit', status: 200, body: 'not json' })
  t.type(await a.submit(req()).catch(e => e), UpstreamUnavailable, 'accepted without an id: the job may exist, indefinite')
  const closed = new FalAdapter({ key: 'k', queueUrl: 'http://127.0.0.1:1', timeoutMs: 500 })
  t.type(await closed.submit(req()).catch(e => e), UpstreamUnavailable, 'connection refused')
  const ac = new AbortController()
  fal.fault({ route: 'submit', delayMs: 1000 })
  const p = a.submit(req(), ac.signal)
  ac.abort()
  t.type(await p.catch(e => e), UpstreamUnavailable, 'caller abort')

  const badKey = adapter({ key: 'wrong' })
  const e401 = await badKey.submit(req()).catch(e => e)
  t.type(e401, UpstreamRefused)
  t.equal(e401.httpStatus, 401)
  fal.fault({ route: 'submit', status: 422, body: { detail: [{ loc: ['body', 'prompt'], msg: 'field required', type: 'value_error.missing' }] } })
  const e422 = await a.submit(req()).catch(e => e)
  t.type(e422, UpstreamRefused)
  t.match(e422.message, /field required/)
  fal.fault({ route: 'submit', status: 404, body: { detail: 'Application not found' } })
  t.type(await a.submit(req()).catch(e => e), UpstreamRefused)
})

t.test('status and result calls: any non-2xx or no answer is UpstreamUnavailable (never a verdict on the job)', async (t) => {
  const a = adapter({ timeoutMs: 300 })
  fal.plan({ steps: ['running'] })
  const h = await a.submit(req())
  for (const status of [500, 429, 404, 401]) {
    fal.fault({ route: 'status', status, retryAfter: status === 429 ? '3' : undefined })
    const e = await a.status(h).catch(e => e)
    t.type(e, UpstreamUnavailable, `status ${status}`)
    if (status === 429) t.equal(e.retryAfterMs, 3000)
  }
  fal.fault({ route: 'status', hang: true })
  t.type(await a.status(h).catch(e => e), UpstreamUnavailable, 'a status call that hangs times out')
  t.same(await a.status(h), { state: 'running' })
  fal.fault({ route: 'result', status: 503 })
  t.type(await a.status(h).catch(e => e), UpstreamUnavailable, 'COMPLETED but the result answers 503')
  t.equal((await a.status(h)).state, 'succeeded', 'next poll reads it')
  const gone: UpstreamHandle = { id: 'nope', model: 'fal-ai/veo3' }
  t.type(await a.status(gone).catch(e => e), UpstreamUnavailable, 'an unknown id (404) is not a failure; URLs rebuilt from the model when the handle has none')
  t.ok(fal.requests.some(r => r.path.startsWith('/fal-ai/veo3/requests/nope/status')))
})

t.test('callbacks: a signed OK callback verifies and gives the state; ERROR content policy flagged', async (t) => {
  const a = adapter()
  fal.plan({ steps: [], media: 'mp4' })
  const h = await a.submit(req('fal-ai/veo3', sink.url()))
  fal.finish(h.id)
  await fal.waitFor(() => fal.callbacks.some(c => c.jobId === h.id), 5000, 'callback')
  const raw = sink.received.at(-1)!.raw
  const v = await a.verifyCallback(raw)
  t.equal(v.ok, true)
  t.equal((v as any).upstreamId, h.id)
  t.equal((v as any).state.state, 'succeeded')
  t.same((v as any).state.outputs, fal.jobs.get(h.id)!.outputs)

  fal.plan({ steps: [], outcome: 'content_policy', callback: false })
  const h2 = await a.submit(req('fal-ai/veo3', sink.url()))
  fal.finish(h2.id)
  const v2 = await a.verifyCallback(await callbackOf(h2.id))
  t.equal(v2.ok, true)
  t.equal((v2 as any).state.state, 'failed')
  t.equal((v2 as any).state.contentPolicy, true)

  fal.plan({ steps: [], callback: false })
  const h3 = await a.submit(req('fal-ai/veo3', sink.url()))
  t.equal(await a.cancel(h3), 'requested')
  t.same((await a.verifyCallback(await callbackOf(h3.id))) as any, { ok: true, upstreamId: h3.id, state: { state: 'canceled' } })
})

/** An adapter, a veo3 job the stub has finished, and that job's correctly signed callback. */
async function finishedWithCallback () {
  const a = adapter()
  fal.plan({ steps: [], callback: false })
  const h = await a.submit(req('fal-ai/veo3', sink.url()))
  fal.finish(h.id)
  return { a, h, good: await callbackOf(h.id) }
}

t.test('callbacks: forged, tampered, stale, future, wrong key, bad headers and a replay with a changed body are refused', async (t) => {
  const { a, h, good } = await finishedWithCallback()
  t.equal((await a.verifyCallback(good)).ok, true)

  const tampered = await a.verifyCallback(await callbackOf(h.id, { tamper: b => b.replace('"OK"', '"ERROR"') }))
  t.same(tampered.ok, false)
  t.match((tampered as any).reason, /signature/)
  const stale = await a.verifyCallback(await callbackOf(h.id, { timestampOffsetS: -301 }))
  t.same(stale, { ok: false, reason: 'timestamp outside 300 s' })
  t.same((await a.verifyCallback(await callbackOf(h.id, { timestampOffsetS: 301 }))).ok, false, 'from the future')
  t.same((await a.verifyCallback(await callbackOf(h.id, { timestampOffsetS: -290 }))).ok, true, 'inside the window')
  const wrong = await a.verifyCallback(await callbackOf(h.id, { wrongKey: true }))
  t.same(wrong.ok, false)
  t.match((wrong as any).reason, /any fal key/)

  const replayBody = { ...good, body: Buffer.from(good.body.toString().replace(fal.jobs.get(h.id)!.outputs[0], 'https://evil.example/x.mp4')) }
  t.same((await a.verifyCallback(replayBody)).ok, false, 'replayed headers with a changed body')
  const otherId = { ...good, headers: { ...good.headers, 'x-fal-webhook-request-id': 'someone-else' } }
  t.same((await a.verifyCallback(otherId)).ok, false, 'signature bound to the request id')
  for (const h of ['x-fal-webhook-signature', 'x-fal-webhook-timestamp', 'x-fal-webhook-user-id', 'x-fal-webhook-request-id']) {
    const headers = { ...good.headers }
    delete headers[h]
    t.same((await a.verifyCallback({ ...good, headers })).ok, false, `without ${h}`)
  }
  t.same((await a.verifyCallback({ ...good, headers: { ...good.headers, 'x-fal-webhook-signature': 'zz' } })).ok, false, 'non-hex signature')
  t.same((await a.verifyCallback({ headers: {}, query: '', body: Buffer.alloc(0) })).ok, false, 'empty request')
})

t.test('a cached key that cannot check an Ed25519 signature counts as not verifying it (no throw); the good key still verifies', async (t) => {
  const { a, good } = await finishedWithCallback()
  t.equal((await a.verifyCallback(good)).ok, true, 'the JWKS is cached')
  const internals = a as unknown as { jwks: { keys: Ed25519Key[]; fetchedAt: number } }
  const real = internals.jwks.keys
  // A point of small order (y = 0): no signature checks out with it, under either implementation.
  const weak = Buffer.alloc(32).toString('base64url')
  const bad = [new Ed25519Key(weak, 'libsodium'), new Ed25519Key(weak, 'node:crypto')]
  internals.jwks = { keys: bad, fetchedAt: Date.now() }
  const refused = await a.verifyCallback(good)
  t.same(refused.ok, false)
  t.match((refused as any).reason, /any fal key/)
  internals.jwks = { keys: [...bad, ...real], fetchedAt: Date.now() }
  t.equal((await a.verifyCallback(good)).ok, true, 'the next key is still tried')
})

t.test('JWKS: fetched once and cached; refreshed when no cached key verifies (rotation), at most once per jwksMinRefreshMs; expired after jwksMaxAgeMs', async (t) => {
  let now = Date.now()
  const a = adapter({ now: () => now, jwksMinRefreshMs: 60_000, jwksMaxAgeMs: 3600_000 })
  fal.plan({ steps: [], callback: false })
  const h = await a.submit(req('fal-ai/veo3', sink.url()))
  fal.finish(h.id)
  const cb1 = await callbackOf(h.id)
  const cb2 = await callbackOf(h.id)
  const before = fal.jwksFetches
  t.equal((await a.verifyCallback(cb1)).ok, true)
  t.equal((await a.verifyCallback(cb2)).ok, true)
  t.equal(a.jwksFetches, 1, 'two callbacks, one JWKS fetch')
  t.equal(fal.jwksFetches - before, 1)

  fal.rotateKey(true)
  const rotated = await callbackOf(h.id)
  now += 1000
  t.equal((await a.verifyCallback(rotated)).ok, false, 'signed by a key not cached, and the cache is younger than jwksMinRefreshMs: refused without a fetch')
  t.equal(a.jwksFetches, 1, 'a flood of bad signatures cannot make us hammer the JWKS')
  now += 60_000
  const fresh = await callbackOf(h.id)
  t.equal((await a.verifyCallback(fresh)).ok, true, 'after jwksMinRefreshMs an unknown signature re-fetches and the new key verifies')
  t.equal(a.jwksFetches, 2)
  t.equal((await a.verifyCallback(await callbackOf(h.id))).ok, true)
  t.equal(a.jwksFetches, 2, 'the new keys are cached')
  now += 3600_000
  // The adapter's clock moved an hour on: the stub signs at that time too.
  t.equal((await a.verifyCallback(await callbackOf(h.id, { timestampOffsetS: Math.round((now - Date.now()) / 1000) }))).ok, true)
  t.equal(a.jwksFetches, 3, 'cache older than jwksMaxAgeMs is re-fetched')

  const capped = adapter({ jwksMaxAgeMs: 7 * 24 * 3600_000 })
  t.equal((capped as any).jwksMaxAgeMs, 24 * 3600_000, 'never trusted longer than 24 h')

  const noJwks = adapter({ jwksUrl: `${fal.url}/nowhere.json` })
  const v = await noJwks.verifyCallback(await callbackOf(h.id))
  t.equal(v.ok, false, 'JWKS unavailable: refused, not thrown')
  t.match((v as any).reason, /JWKS unavailable/)
})

t.test('concurrent callbacks share one JWKS fetch', async (t) => {
  const a = adapter()
  fal.plan({ steps: [], callback: false })
  const h = await a.submit(req('fal-ai/veo3', sink.url()))
  fal.finish(h.id)
  const cbs = await Promise.all([1, 2, 3, 4].map(() => callbackOf(h.id)))
  fal.fault({ route: 'jwks', delayMs: 100 })
  const results = await Promise.all(cbs.map(c => a.verifyCallback(c)))
  t.ok(results.every(r => r.ok))
  t.equal(a.jwksFetches, 1)
})

t.test('stub modes the end-to-end tests use: a job that ends by time calls back on its own; a lost callback leaves polling to find it', async (t) => {
  const verifying = await startSink(adapter())
  t.teardown(verifying.close)
  const a = adapter()
  fal.plan({ steps: ['queued'], finishAfterMs: 30 })
  const h = await a.submit(req('fal-ai/veo3', verifying.url()))
  // Longer than the stub's own 10 s delivery timeout: a slow receiver on a loaded machine shows
  // up as the record's error, not as a timeout here (CI saw 5 s run out once).
  await fal.waitFor(() => fal.callbacks.some(c => c.jobId === h.id), 15_000, 'callback by time')
  const rec = fal.callbacks.find(c => c.jobId === h.id)!
  t.equal(rec.status, 200, 'the receiver (verifying with the adapter) answered 200')
  t.equal(verifying.received.at(-1)!.verdict!.ok, true)
  t.equal(fal.jobs.get(h.id)!.polls, 0, 'completed without a single status call')
  const replayed = await fal.replay(rec, { body: rec.body.replace('"OK"', '"ERROR"') })
  t.equal(replayed.status, 401, 'the same headers with another body: 401')

  fal.plan({ steps: [], finishAfterMs: 10, callback: false })
  const lost = await a.submit(req('fal-ai/veo3', verifying.url()))
  await fal.waitFor(() => fal.jobs.get(lost.id)!.ended !== null, 15_000, 'end')
  t.notOk(fal.callbacks.some(c => c.jobId === lost.id), 'callback lost')
  t.equal((await a.status(lost)).state, 'succeeded', 'polling finds it')
})

t.test('a signed OK callback without payload (fal could not attach it) verifies as a hint without state', async (t) => {
  const a = adapter()
  fal.plan({ steps: [], callback: false })
  const h = await a.submit(req('fal-ai/veo3', sink.url()))
  const job = fal.finish(h.id)
  const body = JSON.stringify({ request_id: h.id, gateway_request_id: h.id, status: 'OK', payload: null, payload_error: 'payload too large' })
  const headers = fal.signCallback(job, body, Math.floor(Date.now() / 1000), false)
  t.same(await a.verifyCallback({ headers, query: '', body: Buffer.from(body) }), { ok: true, upstreamId: h.id })
  const mismatched = JSON.stringify({ request_id: 'other', status: 'OK', payload: { video: { url: 'https://x/v.mp4' } } })
  t.same(await a.verifyCallback({ headers: fal.signCallback(job, mismatched, Math.floor(Date.now() / 1000), false), query: '', body: Buffer.from(mismatched) }), { ok: false, reason: 'body request_id differs from the signed header' })
})

t.test('strict stub: an app without a schema is a 404 refusal; an input the schema refuses is taken, then ends as a 422 detail list (failed)', async (t) => {
  const a = adapter()
  const e404 = await a.submit(req('fal-ai/no-such-app')).catch(e => e)
  t.type(e404, UpstreamRefused)
  t.equal(e404.httpStatus, 404)
  const before = fal.refusals.length
  // veo3.1/fast takes duration "4s"/"6s"/"8s" and needs a prompt.
  const h = await a.submit({ jobId: 'job_1', model: 'fal-ai/veo3.1/fast', input: { duration: '15s' }, callbackUrl: null })
  t.equal(fal.refusals.length, before + 1, 'the stub refused it against config/upstream-schemas')
  fal.finish(h.id, 'succeeded')
  t.equal(fal.jobs.get(h.id)!.ended, 'invalid_input', 'whatever the plan said, the request ends refused')
  const res = await fetch(`${fal.url}/fal-ai/veo3.1/requests/${h.id}`, { headers: { authorization: `Key ${fal.key}` } })
  t.equal(res.status, 422)
  const body = await res.json() as { detail: Array<{ loc: string[]; msg: string; type: string }> }
  t.same(body.detail.map(d => [d.loc.join('.'), d.type]).sort(), [['body.duration', 'one_of'], ['body.prompt', 'missing']], 'pydantic-style detail items')
  const st = await a.status(h)
  t.equal(st.state, 'failed', 'the adapter reads the 422 result as the job failing')
  const ok = await a.submit({ jobId: 'job_2', model: 'fal-ai/veo3.1/fast', input: { prompt: 'p', duration: '8s', aspect_ratio: '9:16' }, callbackUrl: null })
  t.equal(fal.refusals.length, before + 1, 'a valid input is not refused')
  t.equal((await a.status(ok)).state, 'queued')
})
