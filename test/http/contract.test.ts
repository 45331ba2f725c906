// The client contract (docs/decisions.md "Client contract") through the real HTTP server: unreadable 413s, conditional
// required fields, one validation shape, Retry-After on every 429, banned login, discovery at
// / and /v1.
import t from 'tap'
import { request } from 'node:http'
import { createUser, startServer } from '../helpers/server.js'
import { assertError } from '../helpers/assert.js'
import { paidUser } from '../helpers/jobs.js'
import { multipart, png } from '../fixtures/media.js'

const s = await startServer(t, {
  SIM_SPEED: '20',
  TIER_LIMITS: JSON.stringify({ free: { rpm: 100000, max_concurrent: 1, max_streams: 1 }, pro: { rpm: 100000, max_concurrent: 1, max_streams: 1 } }),
})
const MB = 1024 * 1024
const u = await paidUser(s, 100_000)

/**
 * POST with node:http, writing the whole body in 64 KB chunks as a piped stream does. Resolves
 * once the request is over (answer read or socket failed) with the answer and every socket
 * error seen on the way: an EPIPE/ECONNRESET while writing is what a client gets when the
 * server closes before it finished sending.
 */
function nodePost (path: string, body: Buffer, headers: Record<string, string>): Promise<{ status?: number; body?: any; error?: string }> {
  return new Promise((resolve) => {
    const url = new URL(s.url + path)
    const out: { status?: number; body?: any; error?: string } = {}
    let pending = 2
    const settle = () => { if (--pending === 0) resolve(out) }
    const req = request({ host: url.hostname, port: url.port, path, method: 'POST', headers: { ...headers, 'content-length': String(body.length) } }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c) => { text += c })
      res.on('end', () => { let b: any = text; try { b = JSON.parse(text) } catch {} out.status = res.statusCode; out.body = b; settle() })
      res.on('error', (e: any) => { out.error ??= e.code ?? e.message; settle() })
    })
    req.on('error', (e: any) => { out.error ??= e.code ?? e.message; if (pending === 2) settle() })
    req.on('close', settle)
    let off = 0
    const next = () => {
      while (off < body.length) {
        const chunk = body.subarray(off, off + 64 * 1024)
        off += chunk.length
        if (!req.write(chunk)) { req.once('drain', next); return }
      }
      req.end()
    }
    next()
  })
}

t.test('an 11 MB image upload from node:http reads the 413 PAYLOAD_TOO_LARGE (no EPIPE), and the server keeps serving', async (t) => {
  const { body, contentType } = multipart([{ name: 'kind', value: 'image' }, { name: 'file', filename: 'big.png', value: Buffer.concat([png(), Buffer.alloc(11 * MB)]) }])
  const r = await nodePost('/v1/uploads', body, { 'content-type': contentType, 'x-api-key': u.key })
  t.equal(r.error, undefined, 'no socket error')
  t.equal(r.status, 413)
  t.equal(r.body?.code, 'PAYLOAD_TOO_LARGE')
  // File before kind: the largest cap while streaming, the kind's cap once known.
  const late = multipart([{ name: 'file', filename: 'big.png', value: Buffer.concat([png(), Buffer.alloc(11 * MB)]) }, { name: 'kind', value: 'image' }])
  const r2 = await nodePost('/v1/uploads', late.body, { 'content-type': late.contentType, 'x-api-key': u.key })
  t.equal(r2.error, undefined, 'no socket error (file before kind)')
  t.equal(r2.status, 413)
  // Far over the image cap (but under the largest one): most of the body is still unsent when the cap is crossed.
  const far = multipart([{ name: 'kind', value: 'image' }, { name: 'file', filename: 'huge.png', value: Buffer.concat([png(), Buffer.alloc(40 * MB)]) }])
  const r4 = await nodePost('/v1/uploads', far.body, { 'content-type': far.contentType, 'x-api-key': u.key })
  t.equal(r4.error, undefined, 'no socket error (40 MB image)')
  t.equal(r4.status, 413)
  t.equal(r4.body?.code, 'PAYLOAD_TOO_LARGE')
  const ok = multipart([{ name: 'kind', value: 'image' }, { name: 'file', filename: 'small.png', value: png() }])
  const r3 = await nodePost('/v1/uploads', ok.body, { 'content-type': ok.contentType, 'x-api-key': u.key })
  t.equal(r3.status, 201, 'a normal upload still works')
})

t.test('a declared Content-Length over the largest cap gets 413 at once, and node:http reads it', async (t) => {
  const { body, contentType } = multipart([{ name: 'kind', value: 'video' }, { name: 'file', filename: 'big.mp4', value: Buffer.alloc(52 * MB) }])
  const r = await nodePost('/v1/uploads', body, { 'content-type': contentType, 'x-api-key': u.key })
  t.equal(r.error, undefined, 'no socket error')
  t.equal(r.status, 413)
  t.equal(r.body?.code, 'PAYLOAD_TOO_LARGE')
})

t.test('missing conditionally required fields answer 400 VALIDATION_ERROR with details naming the field', async (t) => {
  const cases: Array<[string, string, unknown, string[]]> = [
    ['music without lyrics, not instrumental', 'audio', { model: 'music', title: 'Song' }, ['/lyrics']],
    ['music with instrumental false and no lyrics', 'audio', { model: 'music', instrumental: false }, ['/lyrics']],
    ['music with blank lyrics', 'audio', { model: 'music', lyrics: '   ' }, ['/lyrics']],
    ['voiceover without voice_id', 'audio', { model: 'voiceover', text: 'hello there' }, ['/voice_id']],
    ['voiceover without text', 'audio', { model: 'voiceover', voice_id: 'v1' }, ['/text']],
    ['voiceover without both', 'audio', { model: 'voiceover' }, ['/text', '/voice_id']],
    ['last_frame_url without first_frame_url', 'video', { model: 'seedance-2', prompt: 'p', last_frame_url: 'https://example.com/b.png' }, ['/first_frame_url']],
    ['text-to-video without prompt', 'video', { model: 'seedance-2', duration: '6', resolution: '480p' }, ['/prompt']],
    ['image without prompt', 'image', { model: 'nano-banana' }, ['/prompt']],
    ['lipsync without audio', 'video', { model: 'lipsync', image_url: 'https://example.com/a.png' }, ['/audio_url', '/audio_duration']],
    ['gemini-omni without assets', 'video', { model: 'gemini-omni', prompt: 'p' }, ['/voice_asset_ids', '/character_asset_ids']],
    ['webhook_secret without webhook_url', 'image', { model: 'nano-banana', prompt: 'p', webhook_secret: 's'.repeat(20) }, ['/webhook_url']],
    ['extend without prompt', 'extend', { job_id: 'job_x' }, ['/prompt']],
  ]
  for (const [name, kind, body, paths] of cases) {
    const r = await s.req('POST', kind === 'extend' ? '/v1/extend/video' : `/v1/generate/${kind}`, { key: u.key, body })
    assertError(t, r, 400, 'VALIDATION_ERROR', name)
    t.same(r.body.details?.map((d: any) => d.path), paths, `${name}: details name ${paths.join(', ')}`)
    t.ok(r.body.details?.every((d: any) => typeof d.message === 'string' && d.message.length > 0), `${name}: each detail has a message`)
  }
  // An option the model does not take is still 422 with param.
  const r = await s.req('POST', '/v1/generate/audio', { key: u.key, body: { model: 'music', instrumental: true, lyrics: 'la la' } })
  assertError(t, r, 422, 'UNSUPPORTED_OPTION')
  t.equal(r.body.param, 'lyrics')
})

t.test('one validation shape on every route: unknown fields, enums and missing fields read the same on generate and other routes', async (t) => {
  const gen = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'p', 'a/b': 1 } })
  const hook = await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: 'https://example.com/h', events: ['job.completed'], 'a/b': 1 } })
  assertError(t, gen, 400, 'VALIDATION_ERROR')
  assertError(t, hook, 400, 'VALIDATION_ERROR')
  t.same(gen.body.details, [{ path: '/a~1b', message: 'is not a known field' }], 'generate route')
  t.same(hook.body.details, [{ path: '/a~1b', message: 'is not a known field' }], 'webhooks route: same shape and words')
  // Enums built from literal unions: one issue naming the allowed values.
  const jobs = await s.req('GET', '/v1/jobs?status=nope', { key: u.key })
  assertError(t, jobs, 400, 'VALIDATION_ERROR')
  t.same(jobs.body.details, [{ path: '/status', message: 'must be one of: queued, submitted, processing, completed, failed, cancelled' }])
  t.match(jobs.body.message, /status must be one of: queued, submitted/)
  const ev = await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: 'https://example.com/h', events: ['job.started'] } })
  t.same(ev.body.details, [{ path: '/events/0', message: 'must be one of: job.completed, job.failed' }])
  const img = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'p', output_format: 'gif' } })
  t.same(img.body.details, [{ path: '/output_format', message: 'must be one of: png, jpeg' }])
  // Missing required fields: the same words on both kinds of route.
  const login = await s.req('POST', '/v1/auth/login', { body: { email: 'a@example.com' } })
  t.same(login.body.details, [{ path: '/password', message: 'is required' }])
  const ext = await s.req('POST', '/v1/extend/video', { key: u.key, body: { prompt: 'p' } })
  t.same(ext.body.details, [{ path: '/job_id', message: 'is required' }])
  // The whole body of the wrong type: path '' on both.
  const a = await s.req('POST', '/v1/generate/image', { key: u.key, body: [1] })
  const b = await s.req('POST', '/v1/webhooks', { key: u.key, body: [1] })
  t.same(a.body.details, [{ path: '', message: 'must be object' }])
  t.same(b.body.details, [{ path: '', message: 'must be object' }])
})

t.test('a body that is not JSON says "the body must be JSON" on every route', async (t) => {
  for (const [path, auth] of [['/v1/generate/image', { key: u.key }], ['/v1/webhooks', { key: u.key }], ['/v1/auth/login', {}]] as const) {
    const r = await s.req('POST', path, { ...auth, raw: '-x', headers: { 'content-type': 'application/json' } })
    assertError(t, r, 400, 'VALIDATION_ERROR', path)
    t.equal(r.body.message, 'The body must be JSON', `${path}: message`)
    t.same(r.body.details, [{ path: '', message: 'must be JSON' }], `${path}: details`)
    t.notMatch(r.text, /position|Unexpected|minus sign/, `${path}: no parser internals`)
  }
})

t.test('every 429 carries Retry-After: concurrency_limit_reached and TOO_MANY_STREAMS', async (t) => {
  const v = await paidUser(s, 10_000)
  const first = await s.req('POST', '/v1/generate/video', { key: v.key, body: { model: 'veo3-fast', prompt: 'a slow sunrise over the sea' } })
  t.equal(first.status, 201)
  const over = await s.req('POST', '/v1/generate/video', { key: v.key, body: { model: 'veo3-fast', prompt: 'a second sunrise' } })
  assertError(t, over, 429, 'concurrency_limit_reached')
  t.match(over.headers.get('retry-after'), /^[1-9][0-9]*$/, 'Retry-After on concurrency_limit_reached')
  t.equal(over.body.retry_after, Number(over.headers.get('retry-after')), 'retry_after in the body matches')
  t.equal(over.body.max_concurrent, 1)
  // One stream open (max_streams 1), the second is refused.
  const ctl = new AbortController()
  t.teardown(() => ctl.abort())
  const open = await fetch(`${s.url}/v1/sse/jobs/${first.body.id}`, { headers: { 'x-api-key': v.key }, signal: ctl.signal })
  t.equal(open.status, 200)
  const second = await s.req('GET', `/v1/sse/jobs/${first.body.id}`, { key: v.key })
  assertError(t, second, 429, 'TOO_MANY_STREAMS')
  t.match(second.headers.get('retry-after'), /^[1-9][0-9]*$/, 'Retry-After on TOO_MANY_STREAMS')
  t.equal(second.body.retry_after, Number(second.headers.get('retry-after')))
  ctl.abort()
})

t.test('a banned account cannot log in: 403 ACCOUNT_BANNED (and a wrong password is still 401)', async (t) => {
  const b = await createUser(s, { withKey: false })
  t.equal((await s.req('POST', '/v1/auth/login', { body: { email: b.email, password: b.password } })).status, 200, 'logs in before the ban')
  t.equal((await s.req('PATCH', `/v1/admin/accounts/${b.id}`, { admin: true, body: { banned: true } })).status, 200)
  const r = await s.req('POST', '/v1/auth/login', { body: { email: b.email, password: b.password } })
  assertError(t, r, 403, 'ACCOUNT_BANNED')
  t.equal(r.body.token, undefined, 'no token')
  assertError(t, await s.req('POST', '/v1/auth/login', { body: { email: b.email, password: 'wrong password!' } }), 401, 'INVALID_CREDENTIALS')
})

t.test('GET / and GET /v1 point at the docs and the OpenAPI document', async (t) => {
  for (const p of ['/', '/v1']) {
    const r = await s.req('GET', p)
    t.equal(r.status, 200, p)
    t.match(r.headers.get('content-type'), /application\/json/)
    t.equal(r.body.docs, `${s.config.publicBaseUrl}/v1/docs`)
    t.equal(r.body.openapi, `${s.config.publicBaseUrl}/v1/openapi.json`)
  }
})

t.test('files are reachable the way a generated client calls them: /v1/files/<key with %2F>', async (t) => {
  const { body, contentType } = multipart([{ name: 'kind', value: 'image' }, { name: 'file', filename: 'p.png', value: png() }])
  const up = await s.req('POST', '/v1/uploads', { key: u.key, raw: body, headers: { 'content-type': contentType } })
  t.equal(up.status, 201)
  const key = new URL(up.body.url).pathname.replace(/^\/files\//, '')
  t.match(key, /\//, 'the key has slashes')
  const want = png()
  for (const path of [`/files/${key}`, `/v1/files/${key}`, `/v1/files/${encodeURIComponent(key)}`, `/files/${encodeURIComponent(key)}`]) {
    const r = await fetch(s.url + path)
    t.equal(r.status, 200, path)
    t.same(Buffer.from(await r.arrayBuffer()), want, `${path}: the bytes`)
  }
  const part = await fetch(`${s.url}/v1/files/${encodeURIComponent(key)}`, { headers: { range: 'bytes=0-3' } })
  t.equal(part.status, 206, 'Range works there too')
  await part.arrayBuffer()
})

t.test('POST /auth/signup tells the end user what to do next, in their terms (no operator command); verification then unblocks key creation', async (t) => {
  const email = `newcomer${process.pid}@example.com`
  const r = await s.req('POST', '/v1/auth/signup', { body: { email, password: 'long enough pw' } })
  t.equal(r.status, 201)
  t.equal(r.body.email_verified, false)
  t.match(r.body.next, /operator verifies it \(tell them your user_id\).*POST \/v1\/auth\/login.*POST \/v1\/auth\/keys/)
  t.notMatch(r.body.next, /npm|admin|PATCH/, 'no operator command or route in an end user\'s answer')
  const jwt = (await s.req('POST', '/v1/auth/login', { body: { email, password: 'long enough pw' } })).body.token
  assertError(t, await s.req('POST', '/v1/auth/keys', { jwt, body: { name: 'x' } }), 403, 'NOT_ELIGIBLE')
  // What the operator does (npm run admin -- set <id> --verified true PATCHes the flag).
  t.equal((await s.req('PATCH', `/v1/admin/accounts/${r.body.user_id}`, { admin: true, body: { email_verified: true } })).status, 200)
  t.equal((await s.req('POST', '/v1/auth/keys', { jwt, body: { name: 'x' } })).status, 201)
})
