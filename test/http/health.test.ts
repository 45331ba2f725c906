// GET /v1/health (docs/api.md "Endpoints"): 200 ok, 503 degraded while PostgreSQL is unreachable, and
// back to 200 by itself when it returns (PostgreSQL is cut off with a TCP proxy), and 503 degraded
// while the node drains.
import { connect } from 'node:net'
import t from 'tap'
import { ADMIN_DATABASE_URL, freshDatabase } from '../helpers/db.js'
import { createUser, startServer, type TestServer } from '../helpers/server.js'
import { TcpProxy } from '../fixtures/tcp-proxy.js'
import { waitFor } from '../helpers/wait.js'

function assertShape (t: any, body: any, status: 'ok' | 'degraded'): void {
  t.equal(body.status, status, `status ${status}`)
  t.equal(body.service, 'genjobs')
  t.type(body.version, 'string')
  t.ok(!Number.isNaN(Date.parse(body.timestamp)), 'timestamp is a date-time')
  t.type(body.checks, 'object')
  t.type(body.checks.database, 'string')
}

/** Polls /v1/health until it answers `status` (its answer is cached for a moment). */
async function healthIs (s: TestServer, status: number) {
  return waitFor(async () => { const r = await s.req('GET', '/v1/health'); return r.status === status && r }, { what: `GET /v1/health to answer ${status}`, everyMs: 50 })
}

const direct = await startServer(t)

t.test('GET /v1/health answers 200 ok with the database check, uncached by clients', async (t) => {
  const r = await direct.req('GET', '/v1/health')
  t.equal(r.status, 200)
  assertShape(t, r.body, 'ok')
  t.equal(r.body.checks.database, 'ok')
  t.equal(r.headers.get('cache-control'), 'no-store')
  t.same(Object.keys(r.body).sort(), ['checks', 'service', 'status', 'timestamp', 'version'], 'status, version and checks only: no routes, providers or counts')
  const view = await direct.req('GET', '/v1/admin/providers', { admin: true })
  t.equal(view.status, 200)
  t.same(view.body, { providers: [] }, 'no PROVIDERS_FILE: no routes (every model simulated)')
})

t.test('PostgreSQL unreachable: 503 degraded; reachable again: 200 ok without a restart', async (t) => {
  const pgPort = Number(new URL(ADMIN_DATABASE_URL).port || 5432)
  const proxy = new TcpProxy(pgPort, new URL(ADMIN_DATABASE_URL).hostname)
  await proxy.start() // migrations run at boot, through the proxy
  t.teardown(() => proxy.stop())
  const db = await freshDatabase(t)
  const s = await startServer(t, { DATABASE_URL: proxy.rewrite(db) })
  t.ok(proxy.accepted > 0, 'the service reaches PostgreSQL through the proxy')

  const u = await createUser(s)
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200, 'key and account now cached')
  await s.app.services.metering.flush()
  const ok = await s.req('GET', '/v1/health')
  t.equal(ok.status, 200)
  assertShape(t, ok.body, 'ok')

  await proxy.stop()
  const down = await healthIs(s, 503)
  t.equal(down.status, 503)
  assertShape(t, down.body, 'degraded')
  t.not(down.body.checks.database, 'ok')
  t.match(down.headers.get('content-type'), /application\/json/)

  // Each service probes its own database: the healthy one is not tainted by this one's answer.
  const other = await direct.req('GET', '/v1/health')
  t.equal(other.status, 200, 'another app in the same process still reports ok')
  t.equal(other.body.status, 'ok')

  // A cached key keeps working while PostgreSQL is away (no database on the hot path), and the
  // request's metering row and last_used_at survive the failed flush.
  const usedAt = Date.now()
  const me = await s.req('GET', '/v1/auth/me', { key: u.key })
  t.equal(me.status, 200, 'served from memory')
  const reqId = me.headers.get('x-request-id')
  await s.app.services.metering.flush() // fails: PostgreSQL is away
  const still = await s.req('GET', '/v1/health')
  t.equal(still.status, 503, 'still degraded')

  await proxy.start()
  const back = await healthIs(s, 200)
  t.equal(back.status, 200, 'recovers by itself')
  assertShape(t, back.body, 'ok')
  t.equal(back.body.checks.database, 'ok')

  await s.app.services.metering.flush()
  const sql = s.app.services.sql
  const rows = await sql<any[]>`SELECT status, endpoint FROM request_log WHERE request_id = ${reqId}`
  t.same(rows.map(r => [r.status, r.endpoint]), [[200, '/v1/auth/me']], 'the request made during the outage is metered once')
  const [k] = await sql<any[]>`SELECT last_used_at FROM api_keys WHERE id = ${u.keyId}`
  t.ok(k.last_used_at instanceof Date && k.last_used_at.getTime() >= usedAt - 5, 'last_used_at includes the use during the outage')
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200)
})

/** A keep-alive connection: one request at a time, answered status and parsed body. */
function keepAlive (port: number) {
  const sock = connect(port, '127.0.0.1')
  let buf = Buffer.alloc(0)
  let want: ((r: { status: number; body: any }) => void) | null = null
  let fail: ((e: Error) => void) | null = null
  sock.on('close', () => fail?.(new Error('the connection closed before an answer')))
  sock.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d])
    const end = buf.indexOf('\r\n\r\n')
    if (end < 0 || want === null) return
    const head = buf.subarray(0, end).toString('latin1')
    const len = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0)
    if (buf.length < end + 4 + len) return
    const text = buf.subarray(end + 4, end + 4 + len).toString('utf8')
    buf = buf.subarray(end + 4 + len)
    const w = want
    want = null
    w({ status: Number(head.slice(9, 12)), body: JSON.parse(text) })
  })
  return {
    get: (path: string) => new Promise<{ status: number; body: any }>((resolve, reject) => {
      want = resolve
      fail = reject
      sock.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`)
    }),
    close: () => sock.destroy(),
  }
}

t.test('while the node drains: /v1/health answers 503 degraded with its body, other routes 503 SERVICE_UNAVAILABLE', async (t) => {
  const s = await startServer(t)
  const u = await createUser(s)
  const port = Number(new URL(s.url).port)
  const probe = keepAlive(port)
  t.teardown(() => probe.close())
  t.equal((await probe.get('/v1/health')).status, 200, 'healthy before')
  // A request held in flight (its body not all sent) keeps the node draining.
  const held = connect(port, '127.0.0.1')
  t.teardown(() => held.destroy())
  await new Promise<void>(resolve => held.once('connect', () => resolve()))
  held.write(`POST /v1/auth/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${u.jwt}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{`)
  // A round trip on the other connection: the held request's head, written first, was read by then.
  t.equal((await probe.get('/v1/health')).status, 200, 'still healthy with a request in flight')
  const closing = s.app.close()
  const h = await waitFor(async () => { const r = await probe.get('/v1/health'); return r.status === 503 && r }, { what: 'health to answer 503 while draining', everyMs: 20 })
  assertShape(t, h.body, 'degraded')
  t.equal(h.body.checks.database, 'ok', 'the database is still up: the node is leaving')
  const other = await probe.get('/v1/models')
  t.equal(other.status, 503)
  t.equal(other.body.code, 'SERVICE_UNAVAILABLE')
  held.write('}')
  await closing
})
