// FRONTENDS=2: two uWS front-end threads on one port, each with its share of
// the connections; the rate window per key, the SSE stream cap per account and the job events
// stay exact and complete across them.
import t from 'tap'
import { request, Agent } from 'node:http'
import { startServer, type TestServer } from '../../helpers/server.js'
import { image, paidUser, video } from '../../helpers/jobs.js'
import { openSse, type SseStream } from '../../helpers/sse.js'

const RPM = 40
const TIERS = JSON.stringify({
  free: { rpm: RPM, max_concurrent: 100, max_streams: 12 },
  pro: { rpm: RPM, max_concurrent: 100, max_streams: 12 },
  enterprise: { rpm: RPM, max_concurrent: 100, max_streams: 12 },
  session: { rpm: 100_000, max_concurrent: 100, max_streams: 12 },
})

/** One request on its own connection (so the kernel spreads them over the listening threads). */
function get (s: TestServer, path: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const r = request(`${s.url}${path}`, { headers, agent: new Agent({ keepAlive: false }) }, (res) => {
      let body = ''
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve({ status: res.statusCode!, body }))
    })
    r.on('error', reject)
    r.end()
  })
}

/** Answers per front-end thread for `route` (200s and refusals): the main thread's, then the others'. */
async function perThread (s: TestServer, route: string): Promise<number[]> {
  const mine = s.app.services.metrics.stats().requests.filter(r => r[0] === route).reduce((n, r) => n + r[3], 0)
  const others = (await s.app.frontends!.stats()).map(f => f.requests.filter(r => r[0] === route).reduce((n, r) => n + r[3], 0))
  return [mine, ...others]
}

const s = await startServer(t, { FRONTENDS: '2', SIM_SPEED: '10', TIER_LIMITS: TIERS, SSE_HEARTBEAT_MS: '60000' })

t.test('two front-end threads serve the port', async (t) => {
  t.equal(s.app.frontends?.size, 1, 'one thread besides the main one')
  const before = await perThread(s, '/v1/models')
  const rs = await Promise.all(Array.from({ length: 60 }, () => get(s, '/v1/models', {})))
  t.ok(rs.every(r => r.status === 200), 'every answer 200')
  const after = await perThread(s, '/v1/models')
  const served = after.map((n, i) => n - before[i])
  t.equal(served.reduce((a, b) => a + b, 0), 60)
  t.ok(served.every(n => n > 0), `both threads answered (${served.join(' + ')})`)
})

t.test('one key: exactly rpm requests pass per window across the threads', async (t) => {
  const u = await paidUser(s, 1000)
  const c = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  t.equal(c.status, 201)
  // A fresh key of the same account: its window is empty.
  const k = await s.req('POST', '/v1/auth/keys', { jwt: u.jwt, body: { name: 'second' } })
  t.equal(k.status, 201)
  const before = await perThread(s, '/v1/jobs/:id')
  const rs = await Promise.all(Array.from({ length: 3 * RPM }, () => get(s, `/v1/jobs/${c.body.id}`, { 'x-api-key': k.body.key })))
  const ok = rs.filter(r => r.status === 200).length
  const refused = rs.filter(r => r.status === 429 && JSON.parse(r.body).code === 'RATE_LIMIT_EXCEEDED').length
  const after = await perThread(s, '/v1/jobs/:id')
  const served = after.map((n, i) => n - before[i])
  t.equal(ok, RPM, 'exactly rpm passed')
  t.equal(refused, 2 * RPM, 'every other answer a 429 RATE_LIMIT_EXCEEDED')
  t.ok(served.every(n => n > 0), `both threads answered (${served.join(' + ')})`)
  // Exact: nothing more passes in this window on any thread.
  const more = await Promise.all(Array.from({ length: 20 }, () => get(s, `/v1/jobs/${c.body.id}`, { 'x-api-key': k.body.key })))
  t.ok(more.every(r => r.status === 429), 'the window is full on every thread')
})

t.test('SSE: the stream cap per account is exact across threads, and job events reach the streams of every thread', async (t) => {
  const u = await paidUser(s, 1000)
  const c = await s.req('POST', '/v1/generate/video', { key: u.key, body: video() })
  t.equal(c.status, 201)
  // The kernel picks the thread of each connection, and a busy thread takes its streams' slots
  // last: now and then every open stream lands on one thread. Then the streams are closed and
  // opened again (at most 5 tries), so the cross-thread delivery below is always exercised.
  let open: SseStream[] = []
  let mine = 0
  let others = 0
  for (let attempt = 0; attempt < 5; attempt++) {
    const streams: SseStream[] = await Promise.all(Array.from({ length: 16 }, () => openSse(`${s.url}/v1/sse/jobs/${c.body.id}`, { 'x-api-key': u.key })))
    open = streams.filter(x => x.status === 200)
    const refused = streams.filter(x => x.status === 429 && JSON.parse(x.body).code === 'TOO_MANY_STREAMS')
    t.equal(open.length, 12, 'exactly max_streams streams open')
    t.equal(refused.length, 4, 'the others refused TOO_MANY_STREAMS')
    t.equal(s.app.services.sse.openStreams(u.id), 12, 'the count is the node\'s (every thread)')
    mine = s.app.services.sse.size
    others = (await s.app.frontends!.stats()).reduce((n, f) => n + f.sseOpen, 0)
    if (mine > 0 && others > 0) break
    t.comment(`all ${mine + others} streams on one thread; opening them again`)
    for (const x of open) x.abort()
    while (s.app.services.sse.openStreams(u.id) !== 0) await new Promise(resolve => setTimeout(resolve, 10))
  }
  t.ok(mine > 0 && others > 0 && mine + others >= 12, `streams held by both threads (${mine} + ${others})`)
  // Every stream, whichever thread holds it, sees the job finish and is ended by the server.
  const done = await Promise.all(open.map(x => x.waitFor(e => e.event === 'done', 60_000)))
  t.equal(done.length, 12, 'done reached every stream')
  await Promise.all(open.map(x => x.closed))
  for (const x of open) t.ok(x.events.some(e => e.event === 'status' && JSON.parse(e.data).status === 'completed'), 'the completed status came first')
  await t.resolveMatch((async () => { while (s.app.services.sse.openStreams(u.id) !== 0) await new Promise(resolve => setImmediate(resolve)) })(), undefined, 'slots released on both threads')
})

/** The SSE answer of `path` on its own connection: status and the `id:`/`event:` lines. */
async function sseOnce (path: string, headers: Record<string, string>): Promise<string> {
  const r = await get(s, path, headers)
  return `${r.status} ${r.body.split('\n').filter(l => l.startsWith('id:') || l.startsWith('event:')).join(' ')}`.trim()
}

/**
 * The same SSE request on 24 fresh connections, one after the other (the kernel spreads them
 * over the threads; one at a time stays under the account's stream cap): every distinct answer
 * and how many each thread gave.
 */
async function sseEverywhere (path: string, headers: Record<string, string>): Promise<{ answers: string[]; served: number[] }> {
  const before = await perThread(s, '/v1/sse/jobs/:id')
  const answers = new Set<string>()
  for (let i = 0; i < 24; i++) answers.add(await sseOnce(path, headers))
  const after = await perThread(s, '/v1/sse/jobs/:id')
  return { answers: [...answers], served: after.map((n, i) => n - before[i]) }
}

t.test('SSE of a finished job is answered the same by every thread: status and done with the same ids, 204 at the done id', async (t) => {
  const u = await paidUser(s, 1000)
  const c = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  t.equal(c.status, 201)
  // A ticket: its streams are not rate-limited (the key's window is 40 a minute here).
  const tk = await s.req('POST', '/v1/sse/tickets', { key: u.key, body: { jobId: c.body.id } })
  t.equal(tk.status, 200)
  const path = `/v1/sse/jobs/${c.body.id}?ticket=${encodeURIComponent(tk.body.ticket)}`
  const first = await openSse(`${s.url}${path}`)
  await first.closed
  const last = first.events.slice(-2)
  t.same(last.map(e => e.event), ['status', 'done'], 'the stream followed the job to done')
  t.equal(JSON.parse(last[0].data).status, 'completed')
  const doneId = last[1].id!
  const check = async (label: string): Promise<void> => {
    const fresh = await sseEverywhere(path, {})
    t.same(fresh.answers, [`200 id: ${last[0].id} event: status id: ${doneId} event: done`], `${label}: a fresh stream gets the same status and done on every thread`)
    t.ok(fresh.served.every(n => n > 0), `${label}: both threads answered (${fresh.served.join(' + ')})`)
    const again = await sseEverywhere(path, { 'last-event-id': doneId })
    t.same(again.answers, ['204'], `${label}: a reconnect at the done id gets 204 on every thread`)
    t.ok(again.served.every(n => n > 0), `${label}: both threads answered (${again.served.join(' + ')})`)
  }
  await check('views from the job events')
  // A restarted thread has an empty cache: it reads the job from PostgreSQL, and must agree.
  const pool = s.app.frontends!
  const restarts = pool.restarts
  await pool.crash(1)
  while (pool.restarts === restarts) await new Promise(resolve => setImmediate(resolve))
  await pool.ready()
  await check('after a restart (the view read from PostgreSQL)')
})

t.test('login throttling counts failures across threads', async (t) => {
  const u = await paidUser(s, 10)
  const codes: number[] = []
  for (let i = 0; i < 12; i++) {
    const r = await new Promise<number>((resolve, reject) => {
      const body = JSON.stringify({ email: u.email, password: 'wrong password ' + i })
      const q = request(`${s.url}/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, agent: new Agent({ keepAlive: false }) }, (res) => {
        res.resume()
        res.on('end', () => resolve(res.statusCode!))
      })
      q.on('error', reject)
      q.end(body)
    })
    codes.push(r)
  }
  t.same(codes, [...Array(10).fill(401), 429, 429], 'the 11th failure in a row is throttled, whichever thread answered')
})

t.test('a crashed front-end thread is restarted; the port keeps being served', async (t) => {
  const pool = s.app.frontends!
  const restarts = pool.restarts
  await pool.crash(1)
  const during = await Promise.all(Array.from({ length: 20 }, () => get(s, '/v1/models', {})))
  t.ok(during.every(r => r.status === 200), 'answered meanwhile')
  while (pool.restarts === restarts) await new Promise(resolve => setImmediate(resolve))
  await pool.ready()
  t.equal(pool.restarts, restarts + 1)
  const before = await perThread(s, '/v1/models')
  const rs = await Promise.all(Array.from({ length: 60 }, () => get(s, '/v1/models', {})))
  t.ok(rs.every(r => r.status === 200))
  const after = await perThread(s, '/v1/models')
  t.ok(after.every((n, i) => n - before[i] > 0), 'the restarted thread serves again')
})
