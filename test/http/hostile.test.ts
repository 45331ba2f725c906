// Hostile input through the real server (docs/operations.md "Hostile input"): answers before
// the body was read, a handler that throws mid-body, callback caps and the refusal window,
// unverified accounts, signup throttling, metering of unmatched paths, security headers,
// masked webhook passwords and a PNG text-chunk decompression bomb.
import t from 'tap'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import postgres from 'postgres'
import { CALLBACK_ENV, pngTextBomb, sendOversized } from '../../bench/lib/hostile.js'
import type { Route } from '../../src/http/route.js'
import { multipart, png } from '../fixtures/media.js'
import { rawRequest } from '../fixtures/raw-http.js'
import { assertError } from '../helpers/assert.js'
import { ADMIN_TOKEN, createUser, startServer, type TestServer } from '../helpers/server.js'

const MB = 1024 * 1024

/** A raw route whose body consumer throws on the first chunk: a handler bug mid-body. */
const throwsMidBody: Route = {
  method: 'POST',
  path: '/v1/test/throws-mid-body',
  auth: 'public',
  rawBody: true,
  summary: 'test only',
  tag: 'Test',
  handler: (ctx) => new Promise((resolve) => {
    ctx.bodyStream!.on('data', () => { throw new Error('handler bug while reading the body') })
    ctx.bodyStream!.on('error', () => resolve({ status: 200, body: { never: 'sent' } }))
  }),
}

const s: TestServer = await startServer(t, { WEBHOOK_ALLOWLIST: 'hooks.example.com' })

t.test('Connection: close and an 11 MB image upload written steadily: the client reads its 413 (no EPIPE)', async (t) => {
  const u = await createUser(s)
  const file = Buffer.concat([png(), Buffer.alloc(11 * MB)])
  const form = multipart([{ name: 'kind', value: 'image' }, { name: 'file', value: file, filename: 'big.png' }])
  for (const close of [true, false]) {
    const r = await sendOversized(s.url, 'POST', '/v1/uploads', {
      bytes: form.body.length, body: form.body, close, chunk: 64 * 1024, everyMs: 2,
      headers: { 'content-type': form.contentType, 'x-api-key': u.key },
    })
    t.equal(r.writeError, null, `${close ? 'close' : 'keep-alive'}: the whole body was written`)
    t.equal(r.status, 413, `${close ? 'close' : 'keep-alive'}: 413 read after writing`)
    t.match(JSON.parse(r.body), { error: true, code: 'PAYLOAD_TOO_LARGE' })
  }
  // A JSON route's early 413 (declared length over 1 MB) the same way.
  const j = await sendOversized(s.url, 'POST', '/v1/auth/login', { bytes: 2 * MB, close: true, chunk: 64 * 1024 })
  t.equal(j.writeError, null)
  t.equal(j.status, 413)
  // Chunked and over the cap while streaming, with Connection: close.
  const c = await sendOversized(s.url, 'POST', '/v1/auth/login', { bytes: 3 * MB, chunked: true, close: true, chunk: 64 * 1024 })
  t.equal(c.writeError, null)
  t.equal(c.status, 413)
})

t.test('a handler that throws mid-body: that request is answered 500, every other connection is served, the error is counted', async (t) => {
  const srv = await startServer(t, {}, {}, { routes: [throwsMidBody] })
  // Another client is mid-body on its own connection when the handler fails.
  const slow = sendOversized(srv.url, 'POST', '/v1/auth/login', { bytes: 600 * 1024, chunk: 16 * 1024, everyMs: 5 })
  const bad = await sendOversized(srv.url, 'POST', '/v1/test/throws-mid-body', { bytes: 200 * 1024 })
  t.equal(bad.status, 500, 'the failing request gets its answer')
  t.match(JSON.parse(bad.body), { error: true, code: 'INTERNAL_ERROR' })
  const other = await slow
  t.equal(other.status, 400, 'the other connection finished its body and got its own answer (not JSON: 400)')
  t.equal((await fetch(`${srv.url}/v1/health`)).status, 200)
  const m = await fetch(`${srv.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })
  t.match(await m.text(), /genjobs_uncaught_errors_total 1\b/, 'counted once in /metrics')
})

t.test('callbacks: over 256 KiB refused before any signature work, with or without Content-Length; refusals per address are windowed', async (t) => {
  const p = await startServer(t, CALLBACK_ENV)
  const big = await sendOversized(p.url, 'POST', '/v1/providers/replicate/callback', { bytes: 300 * 1024 })
  t.equal(big.status, 413)
  t.match(JSON.parse(big.body), { code: 'PAYLOAD_TOO_LARGE', details: { max_bytes: 256 * 1024 } })
  const chunked = await sendOversized(p.url, 'POST', '/v1/providers/kie/callback', { bytes: 300 * 1024, chunked: true })
  t.equal(chunked.status, 413)
  const forged = await p.req('POST', '/v1/providers/replicate/callback', { raw: JSON.stringify({ id: 'p1', status: 'succeeded' }), headers: { 'content-type': 'application/json', 'webhook-id': 'msg_1', 'webhook-timestamp': String(Math.floor(Date.now() / 1000)), 'webhook-signature': 'v1,' + 'A'.repeat(44) } })
  assertError(t, forged, 401, 'CALLBACK_UNVERIFIED')
  // 3 refusals so far; 57 more fill the minute's window, the next is 429 before anything is read.
  for (let i = 0; i < 57; i++) {
    const r = await p.req('POST', '/v1/providers/fal/callback', { raw: '{}', headers: { 'content-type': 'application/json' } })
    t.equal(r.status, 401)
  }
  const limited = await sendOversized(p.url, 'POST', '/v1/providers/fal/callback', { bytes: 2 * MB, close: true })
  t.equal(limited.status, 429, 'the 61st refused callback of the minute: 429')
  t.match(JSON.parse(limited.body), { code: 'RATE_LIMIT_EXCEEDED' })
  const again = await fetch(`${p.url}/v1/providers/kie/callback`, { method: 'POST', body: '{}' })
  t.equal(again.status, 429)
  t.ok(Number(again.headers.get('retry-after')) >= 1, 'with Retry-After')
  t.equal((await fetch(`${p.url}/v1/health`)).status, 200)
})

t.test('signups are throttled per client address: 20 an hour, then 429 with Retry-After', async (t) => {
  const p = await startServer(t)
  for (let i = 0; i < 20; i++) {
    const r = await p.req('POST', '/v1/auth/signup', { body: { email: `farm${i}_${Date.now()}@example.com`, password: 'correct horse battery' } })
    t.equal(r.status, 201, `signup ${i + 1}`)
  }
  const r = await p.req('POST', '/v1/auth/signup', { body: { email: `farm_over_${Date.now()}@example.com`, password: 'correct horse battery' } })
  assertError(t, r, 429, 'RATE_LIMIT_EXCEEDED')
  t.ok(Number(r.headers.get('retry-after')) > 0, 'Retry-After')
  t.same(r.body.retry_after > 3000, true, 'the hour window says so')
})

t.test('an unverified account creates no job, batch or upload, with a session or with a key; nothing is charged', async (t) => {
  const img = multipart([{ name: 'kind', value: 'image' }, { name: 'file', value: png(), filename: 'a.png' }])
  const tryAll = async (auth: { jwt?: string; key?: string }, label: string) => {
    const attempts = [
      await s.req('POST', '/v1/generate/video', { ...auth, body: { model: 'veo3-fast', prompt: 'a paper boat' } }),
      await s.req('POST', '/v1/generate/image', { ...auth, body: { model: 'nano-banana', prompt: 'a paper boat' } }),
      await s.req('POST', '/v1/batch', { ...auth, body: { items: [{ type: 'image', model: 'nano-banana', prompt: 'a paper boat' }] } }),
      await s.req('POST', '/v1/uploads', { ...auth, raw: img.body, headers: { 'content-type': img.contentType } }),
    ]
    for (const r of attempts) {
      assertError(t, r, 403, 'NOT_ELIGIBLE', label)
      t.equal(r.body.reason, 'email_unverified', `${label}: reason`)
    }
  }
  const session = await createUser(s, { verified: false })
  await tryAll({ jwt: session.jwt }, 'session')
  const keyed = await createUser(s)
  const p = await s.req('PATCH', `/v1/admin/accounts/${keyed.id}`, { admin: true, body: { email_verified: false } })
  t.equal(p.status, 200)
  await tryAll({ key: keyed.key }, 'key')
  for (const id of [session.id, keyed.id]) {
    const a = await s.req('GET', `/v1/admin/accounts/${id}`, { admin: true })
    t.equal(a.body.credits, 200, 'nothing charged')
  }
  await s.req('PATCH', `/v1/admin/accounts/${keyed.id}`, { admin: true, body: { email_verified: true } })
  const ok = await s.req('POST', '/v1/generate/image', { key: keyed.key, body: { model: 'nano-banana', prompt: 'a paper boat' } })
  t.equal(ok.status, 201, 'verified again: created')
})

t.test('unmatched and anonymous requests are metered as `unmatched` or their route, never by raw path', async (t) => {
  const u = await createUser(s)
  for (let i = 0; i < 30; i++) {
    await fetch(`${s.url}/v1/no-such-${i}-${Math.random().toString(36).slice(2)}`)
    await fetch(`${s.url}/x${i}/${Math.random().toString(36).slice(2)}`, { method: 'POST', body: '{}' })
    await fetch(`${s.url}/v1/files/uploads/2026/01/u_${Math.random().toString(36).slice(2)}.png`)
  }
  await s.req('GET', '/v1/credits', { key: u.key })
  await s.app.services.metering.flush()
  const sql = postgres(s.databaseUrl, { max: 1, onnotice: () => {} })
  t.teardown(() => sql.end())
  const anon = await sql<{ endpoint: string; n: number }[]>`SELECT endpoint, count(*)::int AS n FROM request_log WHERE account_id IS NULL GROUP BY endpoint`
  const names = anon.map(r => r.endpoint)
  t.ok(names.includes('unmatched'), 'unmatched paths share one endpoint')
  t.equal(names.filter(n => /no-such|\/x\d|u_/.test(n)).length, 0, `no raw path kept (${names.join(', ')})`)
  const unmatched = anon.find(r => r.endpoint === 'unmatched')!
  t.ok(unmatched.n >= 60, 'every unmatched request counted')
  const mine = await sql<{ endpoint: string }[]>`SELECT endpoint FROM request_log WHERE account_id = ${u.id}`
  t.ok(mine.some(r => r.endpoint === '/v1/credits'), 'an account\'s own requests are metered as before')
})

t.test('security headers: nosniff on every JSON answer, no-store on answers that carry a secret; a webhook URL password is masked', async (t) => {
  const u = await createUser(s)
  const job = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'headers' } })
  t.equal(job.status, 201)
  const answers = {
    models: await fetch(`${s.url}/v1/models`),
    job: await fetch(`${s.url}/v1/jobs/${job.body.id}`, { headers: { 'x-api-key': u.key } }),
    jobAgain: await fetch(`${s.url}/v1/jobs/${job.body.id}`, { headers: { 'x-api-key': u.key } }),
    notFound: await fetch(`${s.url}/v1/nope`),
    created: job,
  }
  for (const [name, r] of Object.entries(answers)) t.equal(r.headers.get('x-content-type-options'), 'nosniff', name)
  const login = await s.req('POST', '/v1/auth/login', { body: { email: u.email, password: u.password } })
  t.equal(login.status, 200)
  t.equal(login.headers.get('cache-control'), 'no-store', 'login')
  const key = await s.req('POST', '/v1/auth/keys', { jwt: u.jwt, body: { name: 'second' } })
  t.equal(key.headers.get('cache-control'), 'no-store', 'key creation')
  const rotated = await s.req('POST', `/v1/auth/keys/${key.body.id}/rotate`, { jwt: u.jwt })
  t.equal(rotated.headers.get('cache-control'), 'no-store', 'key rotation')
  const hook = await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: 'https://ops:s3cr3t-pass@hooks.example.com/in?x=1', events: ['job.completed'] } })
  t.equal(hook.status, 201)
  t.equal(hook.headers.get('cache-control'), 'no-store', 'webhook creation')
  t.equal(hook.body.url, 'https://ops:****@hooks.example.com/in?x=1', 'password masked in the creation answer')
  const list = await s.req('GET', '/v1/webhooks', { key: u.key })
  t.equal(list.body.data[0].url, 'https://ops:****@hooks.example.com/in?x=1', 'and in the listing')
  t.notMatch(list.text, /s3cr3t/)
})

t.test('a 3 MB PNG whose 3,000 zTXt chunks each inflate to 1 MiB: refused fast, event loop free, memory flat', async (t) => {
  const u = await createUser(s)
  const bomb = pngTextBomb(3000, MB)
  t.ok(bomb.length < 4 * MB, `the bomb is ${(bomb.length / MB).toFixed(1)} MB`)
  const form = multipart([{ name: 'kind', value: 'image' }, { name: 'file', value: bomb, filename: 'bomb.png' }])
  // The server runs in this process: its event loop and memory are this process's.
  global.gc?.()
  const rssBefore = process.memoryUsage().rss
  const loop = monitorEventLoopDelay({ resolution: 10 })
  loop.enable()
  const r = await s.req('POST', '/v1/uploads', { key: u.key, raw: form.body, headers: { 'content-type': form.contentType } })
  loop.disable()
  const grewMb = (process.memoryUsage().rss - rssBefore) / MB
  assertError(t, r, 400, 'VALIDATION_ERROR')
  t.match(r.body.message, /text metadata/)
  t.comment(`event-loop delay max ${(loop.max / 1e6).toFixed(1)} ms; resident memory grew ${grewMb.toFixed(1)} MB`)
  t.ok(loop.max / 1e6 < 1000, 'the event loop never stalled a second')
  t.ok(grewMb < 64, 'memory grew under 64 MB')
  // An image with ordinary metadata still passes, and a term in it still fails the screen.
  const plain = multipart([{ name: 'kind', value: 'image' }, { name: 'file', value: png({ text: { Title: 'holiday' } }), filename: 'ok.png' }])
  t.equal((await s.req('POST', '/v1/uploads', { key: u.key, raw: plain.body, headers: { 'content-type': plain.contentType } })).status, 201)
  const bad = multipart([{ name: 'kind', value: 'image' }, { name: 'file', value: png({ text: { Title: 'forbidden-test-term' } }), filename: 'bad.png' }])
  assertError(t, await s.req('POST', '/v1/uploads', { key: u.key, raw: bad.body, headers: { 'content-type': bad.contentType } }), 403, 'CONTENT_POLICY_VIOLATION')
})


const JSON_TYPE = { 'content-type': 'application/json' }

t.test('strings PostgreSQL cannot store and bodies nested too deep are 400s, not 500s nor a hang; nothing is charged', async (t) => {
  const u = await createUser(s)
  const before = (await s.req('GET', '/v1/credits', { key: u.key })).body.credits
  const lone = await s.req('POST', '/v1/generate/image', { key: u.key, headers: JSON_TYPE, raw: '{"model":"nano-banana","prompt":"\\ud800 kite"}' })
  assertError(t, lone, 400, 'VALIDATION_ERROR', 'a lone surrogate in the prompt')
  t.match(lone.body.details, [{ path: '/prompt' }])
  const audio = await s.req('POST', '/v1/generate/audio', { key: u.key, headers: JSON_TYPE, raw: '{"model":"voiceover","text":"hi","voice_id":"\\udfff"}' })
  assertError(t, audio, 400, 'VALIDATION_ERROR', 'a lone surrogate in voice_id')
  const started = Date.now()
  const deep = `{"model":"kling-3.0","prompt":"d","multi_shots":true,"multi_prompt":[${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}]}`
  assertError(t, await s.req('POST', '/v1/generate/video', { key: u.key, headers: JSON_TYPE, raw: deep }), 400, 'VALIDATION_ERROR', 'nested 5,000 deep')
  t.ok(Date.now() - started < 5000, 'answered at once')
  t.equal((await s.req('GET', '/v1/credits', { key: u.key })).body.credits, before, 'nothing charged')
  // A NUL in a query value or a path parameter: refused, or not found.
  assertError(t, await s.req('GET', '/v1/jobs?model=%00', { key: u.key }), 400, 'VALIDATION_ERROR', '?model=%00')
  assertError(t, await s.req('GET', '/v1/videos?model=a%00b', { key: u.key }), 400, 'VALIDATION_ERROR', 'library ?model=')
  assertError(t, await s.req('GET', '/v1/admin/accounts?q=%00', { admin: true }), 400, 'VALIDATION_ERROR', 'admin ?q=')
  const path = await s.req('GET', '/v1/admin/jobs/%00', { admin: true })
  t.ok(path.status === 404 || path.status === 400, `admin/jobs/%00: ${path.status} ${path.text}`)
  t.equal((await s.req('GET', '/v1/health')).status, 200)
})

t.test('framing the service will not guess at: differing Content-Length headers 400, a Content-Encoding 415; nothing charged', async (t) => {
  const u = await createUser(s)
  const port = Number(new URL(s.url).port)
  const before = (await s.req('GET', '/v1/credits', { key: u.key })).body.credits
  const body = JSON.stringify({ model: 'nano-banana', prompt: 'a kite' })
  const two = await rawRequest(port, 'POST', '/v1/generate/image', [['X-API-Key', u.key], ['Content-Type', 'application/json'], ['Content-Length', '5']], body)
  t.equal(two.status, 400, two.text)
  t.equal(two.body.code, 'VALIDATION_ERROR')
  t.match(two.body.message, /Content-Length headers that differ/)
  const gz = await rawRequest(port, 'POST', '/v1/generate/image', [['X-API-Key', u.key], ['Content-Type', 'application/json'], ['Content-Encoding', 'gzip']], body)
  t.equal(gz.status, 415, gz.text)
  t.equal(gz.body.code, 'UNSUPPORTED_MEDIA_TYPE')
  t.equal((await s.req('GET', '/v1/credits', { key: u.key })).body.credits, before, 'nothing charged')
  const plain = await rawRequest(port, 'POST', '/v1/generate/image', [['X-API-Key', u.key], ['Content-Type', 'application/json'], ['Content-Encoding', 'identity']], body)
  t.equal(plain.status, 201, 'Content-Encoding: identity is a plain body')
})
