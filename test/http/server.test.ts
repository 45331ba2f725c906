import t from 'tap'
import { request } from 'node:http'
import { connect } from 'node:net'
import { decode as toonDecode } from '@toon-format/toon'
import { startServer } from '../helpers/server.js'

const s = await startServer(t)

function assertEnvelope (t: any, body: any, code: string): void {
  t.equal(body.error, true, 'error: true')
  t.equal(body.code, code, `code ${code}`)
  t.type(body.message, 'string', 'message is a string')
}

t.test('an unknown route answers 404 NOT_FOUND in the error envelope', async (t) => {
  const r = await s.req('GET', '/v1/does-not-exist')
  t.equal(r.status, 404)
  assertEnvelope(t, r.body, 'NOT_FOUND')
  t.match(r.headers.get('content-type'), /application\/json/)
})

t.test('a known path with an unknown method answers 404 NOT_FOUND', async (t) => {
  const r = await s.req('PUT', '/v1/health')
  t.equal(r.status, 404)
  assertEnvelope(t, r.body, 'NOT_FOUND')
})

t.test('malformed JSON answers 400 VALIDATION_ERROR with details', async (t) => {
  const r = await s.req('POST', '/v1/auth/login', { raw: '{"email": ', headers: { 'content-type': 'application/json' } })
  t.equal(r.status, 400)
  assertEnvelope(t, r.body, 'VALIDATION_ERROR')
  t.ok(Array.isArray(r.body.details))
})

t.test('a JSON body sent as text/plain (or another non-JSON type) answers 415 UNSUPPORTED_MEDIA_TYPE; JSON types, none and curl\'s default are read', async (t) => {
  const login = JSON.stringify({ email: 'nobody@example.com', password: 'wrong-password' })
  for (const type of ['text/plain;charset=UTF-8', 'multipart/form-data; boundary=x', 'application/xml', 'text/json']) {
    const r = await s.req('POST', '/v1/auth/login', { raw: login, headers: { 'content-type': type } })
    t.equal(r.status, 415, type)
    assertEnvelope(t, r.body, 'UNSUPPORTED_MEDIA_TYPE')
    t.match(r.body.message, /application\/json/, 'the message names the type to send')
  }
  // fetch sends text/plain;charset=UTF-8 for a string body without a Content-Type.
  const plain = await fetch(`${s.url}/v1/auth/login`, { method: 'POST', body: login })
  t.equal(plain.status, 415, 'fetch with a string body and no header')
  for (const type of ['application/json', 'application/json; charset=utf-8', 'Application/JSON', 'application/merge-patch+json', 'application/x-www-form-urlencoded']) {
    const r = await s.req('POST', '/v1/auth/login', { raw: login, headers: { 'content-type': type } })
    t.equal(r.status, 401, `${type}: read as JSON (wrong credentials)`)
    t.equal(r.body.code, 'INVALID_CREDENTIALS')
  }
  // No Content-Type at all (node:http sends none unless told).
  const none = await new Promise<number>((resolve, reject) => {
    const u = new URL(s.url)
    const req = request({ host: u.hostname, port: u.port, path: '/v1/auth/login', method: 'POST', headers: { 'content-length': String(Buffer.byteLength(login)) } }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode!)) })
    req.on('error', reject)
    req.end(login)
  })
  t.equal(none, 401, 'no Content-Type: read as JSON')
  // An empty body with any type is no body (routes whose body is optional).
  const empty = await s.req('POST', '/v1/auth/login', { raw: '', headers: { 'content-type': 'text/plain' } })
  t.equal(empty.status, 400, 'an empty text/plain body is a missing body, not a 415')
})

t.test('schema failures list each problem with its path', async (t) => {
  const r = await s.req('POST', '/v1/auth/signup', { body: { email: 'not-an-email', password: 'x' } })
  t.equal(r.status, 400)
  assertEnvelope(t, r.body, 'VALIDATION_ERROR')
  const paths = r.body.details.map((d: any) => d.path).sort()
  t.same(paths, ['/email', '/password'])
})

t.test('a JSON body over 1 MB declared by Content-Length answers 413 PAYLOAD_TOO_LARGE', async (t) => {
  const big = JSON.stringify({ email: 'a@b.co', password: 'x'.repeat(1024 * 1024 + 10) })
  const r = await s.req('POST', '/v1/auth/login', { raw: big, headers: { 'content-type': 'application/json' } })
  t.equal(r.status, 413)
  assertEnvelope(t, r.body, 'PAYLOAD_TOO_LARGE')
})

t.test('a chunked JSON body crossing 1 MB is cut off while streaming with 413', async (t) => {
  const u = new URL(s.url)
  const reply = await new Promise<string>((resolve, reject) => {
    const sock = connect(Number(u.port), u.hostname)
    let got = ''
    // Resolve as soon as the whole 413 arrived: the server keeps the connection (it discards
    // the rest of the body rather than resetting a client that is still sending).
    sock.on('data', (d) => {
      got += d.toString()
      const m = /content-length: (\d+)\r\n/i.exec(got)
      const bodyAt = got.indexOf('\r\n\r\n')
      if (m && bodyAt >= 0 && got.length >= bodyAt + 4 + Number(m[1])) { sock.destroy(); resolve(got) }
    })
    sock.on('close', () => resolve(got))
    sock.on('error', (e: any) => (e.code === 'ECONNRESET' || e.code === 'EPIPE') ? undefined : reject(e))
    sock.write('POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n')
    const chunk = Buffer.alloc(64 * 1024, 'a')
    let sent = 0
    const pump = () => {
      // Up to 8 MB; the server must answer and close long before that.
      while (sent < 8 * 1024 * 1024 && !sock.destroyed && got === '') {
        sent += chunk.length
        // One write per chunk: uWS v20.30 resets the connection when a chunk-size line is split
        // across TCP reads (see docs/decisions.md); real clients write each chunk whole.
        const ok = sock.write(Buffer.concat([Buffer.from(chunk.length.toString(16) + '\r\n'), chunk, Buffer.from('\r\n')]))
        if (!ok) { sock.once('drain', pump); return }
      }
    }
    pump()
    setTimeout(() => sock.destroy(), 10_000).unref()
  })
  t.match(reply, /^HTTP\/1\.1 413 /)
  assertEnvelope(t, JSON.parse(reply.slice(reply.indexOf('{'), reply.lastIndexOf('}') + 1)), 'PAYLOAD_TOO_LARGE')
})

t.test('every response carries X-Request-Id; a valid incoming one is echoed', async (t) => {
  const a = await s.req('GET', '/v1/health')
  t.match(a.headers.get('x-request-id'), /^req_/)
  const b = await s.req('GET', '/v1/health', { headers: { 'x-request-id': 'my-trace.42' } })
  t.equal(b.headers.get('x-request-id'), 'my-trace.42')
  const c = await s.req('GET', '/v1/nope', { headers: { 'x-request-id': 'bad id with spaces' } })
  t.match(c.headers.get('x-request-id'), /^req_/)
})

t.test('Accept: application/toon answers TOON with X-TOON-Dict, errors included', async (t) => {
  const ok = await s.req('GET', '/v1/health', { headers: { accept: 'application/toon' } })
  t.equal(ok.status, 200)
  t.match(ok.headers.get('content-type'), /application\/toon/)
  t.equal(ok.headers.get('x-toon-dict'), 'none')
  const decoded = toonDecode(ok.text) as any
  t.equal(decoded.status, 'ok')
  t.equal(decoded.checks.database, 'ok')

  const err = await s.req('GET', '/v1/nope', { headers: { accept: 'application/toon' } })
  t.equal(err.status, 404)
  t.equal(err.headers.get('x-toon-dict'), 'none')
  const e = toonDecode(err.text) as any
  t.equal(e.error, true)
  t.equal(e.code, 'NOT_FOUND')

  const auth = await s.req('GET', '/v1/auth/me', { headers: { accept: 'application/toon' } })
  t.equal(auth.status, 401)
  t.equal(auth.headers.get('x-toon-dict'), 'none')
  t.equal((toonDecode(auth.text) as any).code, 'AUTH_REQUIRED')

  // Media types compare without regard to case; a q of 0 refuses TOON (src/http/respond.ts negotiate).
  const upper = await s.req('GET', '/v1/health', { headers: { accept: 'APPLICATION/TOON' } })
  t.match(upper.headers.get('content-type'), /application\/toon/, 'APPLICATION/TOON')
  t.equal(upper.headers.get('x-toon-dict'), 'none')
  const refused = await s.req('GET', '/v1/health', { headers: { accept: 'application/toon;q=0, application/json' } })
  t.match(refused.headers.get('content-type'), /application\/json/, 'q=0: JSON')
  t.equal(refused.headers.get('x-toon-dict'), null)
})

t.test('GET /v1/health reports the database check', async (t) => {
  const r = await s.req('GET', '/v1/health')
  t.equal(r.status, 200)
  t.equal(r.body.status, 'ok')
  t.equal(r.body.service, 'genjobs')
  t.type(r.body.version, 'string')
  t.ok(!Number.isNaN(Date.parse(r.body.timestamp)))
  t.same(r.body.checks, { database: 'ok' })
})

t.test('CORS preflight is answered without authentication', async (t) => {
  const r = await s.req('OPTIONS', '/v1/jobs')
  t.equal(r.status, 204)
  t.equal(r.headers.get('access-control-allow-origin'), '*')
})

t.test('HEAD answers a GET route\'s status and headers with its Content-Length and no body', async (t) => {
  const get = await s.req('GET', '/v1/models')
  const head = await fetch(`${s.url}/v1/models`, { method: 'HEAD' })
  t.equal(head.status, 200)
  t.equal(head.headers.get('content-length'), String(Buffer.byteLength(get.text)))
  t.equal(head.headers.get('etag'), get.headers.get('etag'))
  t.equal((await head.text()), '')
  const missing = await fetch(`${s.url}/v1/nope`, { method: 'HEAD' })
  t.equal(missing.status, 404)
})
