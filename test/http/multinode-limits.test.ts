import t from 'tap'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { startServer, createUser, type TestServer, type TestUser } from '../helpers/server.js'

/**
 * The free trial, the balance and per-key concurrency are exact across
 * two nodes on one database (REDIS_URL set). Each race sends its requests to both nodes at once.
 */
const REDIS_URL = process.env.REDIS_URL_TEST || process.env.REDIS_URL || 'redis://127.0.0.1:6379'

async function redisUp (): Promise<boolean> {
  const r = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  try { await r.connect(); await r.ping(); return true } catch { return false } finally { r.disconnect() }
}

if (!(await redisUp())) {
  t.test('trial, balance and concurrency are exact across nodes', { skip: `Redis is not reachable at ${REDIS_URL}` }, () => {})
} else {
  const env = {
    REDIS_URL,
    REDIS_PREFIX: `gjl${randomBytes(4).toString('hex')}`,
    // Slow simulated jobs: everything created stays in flight for the whole test.
    SIM_SPEED: '0.5',
    TIER_LIMITS: JSON.stringify({ free: { rpm: 100000 }, pro: { rpm: 100000 }, enterprise: { rpm: 100000 } }),
  }
  const a = await startServer(t, env)
  const b = await startServer(t, { ...env, DATABASE_URL: a.databaseUrl })
  const sql = a.app.services.sql

  /** `n` identical requests, alternating between the two nodes, all sent at once. */
  function race (n: number, path: string, u: TestUser, body: (i: number) => unknown) {
    return Promise.all(Array.from({ length: n }, (_, i) => (i % 2 === 0 ? a : b).req('POST', path, { key: u.key, body: body(i) })))
  }

  async function dbCredits (id: number): Promise<number> {
    const [r] = await sql<{ credits: number }[]>`SELECT credits FROM accounts WHERE id = ${id}`
    return r.credits
  }

  async function purchased (s: TestServer, credits: number): Promise<TestUser> {
    const u = await createUser(s, { credits: 0 })
    const r = await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits } })
    t.equal(r.status, 201, r.text)
    return u
  }

  t.test('free trial: 5 rounds of 20 concurrent video requests over 2 nodes give exactly 1 free video each', async (t) => {
    for (let round = 0; round < 5; round++) {
      const u = await createUser(a, { credits: 200 })
      // Both nodes have the account loaded (the stale-state case).
      await Promise.all([a.req('GET', '/v1/credits', { key: u.key }), b.req('GET', '/v1/credits', { key: u.key })])
      const rs = await race(20, '/v1/generate/video', u, i => ({ model: 'seedance-2-mini', prompt: `trial ${round} ${i}`, resolution: '480p', duration: '6' }))
      const ok = rs.filter(r => r.status === 201)
      const codes = rs.filter(r => r.status !== 201).map(r => r.body?.code)
      t.equal(ok.length, 1, `round ${round}: exactly one free video (${rs.map(r => r.status).join(',')})`)
      t.ok(codes.every(c => c === 'upgrade_required'), `round ${round}: the others are upgrade_required`)
      const [row] = await sql<{ n: number; used: number }[]>`
        SELECT (SELECT count(*)::int FROM jobs WHERE account_id = ${u.id}) AS n, free_videos_used AS used FROM accounts WHERE id = ${u.id}`
      t.equal(row.n, 1, 'one job row')
      t.equal(row.used, 1, 'free_videos_used is 1')
      t.equal(await dbCredits(u.id), 150, 'charged once')
    }
  })

  t.test('balance: every 201 carries the committed balance, never negative; both nodes show it afterwards', async (t) => {
    for (let round = 0; round < 3; round++) {
      const u = await purchased(a, 60)
      await Promise.all([a.req('GET', '/v1/credits', { key: u.key }), b.req('GET', '/v1/credits', { key: u.key })])
      const rs = await race(10, '/v1/generate/image', u, i => ({ model: 'nano-banana', prompt: `spend ${round} ${i}` }))
      const ok = rs.filter(r => r.status === 201)
      t.equal(ok.length, 6, `round ${round}: 60 credits buy six 10-credit images`)
      t.ok(rs.filter(r => r.status !== 201).every(r => r.status === 402 && r.body.code === 'INSUFFICIENT_CREDITS'), 'the rest are 402')
      const remaining = ok.map(r => r.body.remaining_credits as number).sort((x, y) => y - x)
      t.same(remaining, [50, 40, 30, 20, 10, 0], 'each 201 shows the balance its own charge committed')
      t.equal(await dbCredits(u.id), 0)
      for (const s of [a, b]) {
        t.equal((await s.req('GET', '/v1/credits', { key: u.key })).body.credits, 0, 'GET /v1/credits shows the committed balance')
        t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).body.credits, 0, 'GET /v1/auth/me shows the committed balance')
      }
    }
  })

  t.test('a balance spent on one node is shown at once by the other', async (t) => {
    const u = await purchased(a, 1000)
    t.equal((await b.req('GET', '/v1/credits', { key: u.key })).body.credits, 1000)
    t.equal((await b.req('GET', '/v1/auth/me', { key: u.key })).body.credits, 1000)
    const r = await a.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'kling-3.0', prompt: 'spend on A', mode: 'pro', duration: '15' } })
    t.equal(r.status, 201, r.text)
    t.equal(r.body.remaining_credits, 400)
    t.equal((await b.req('GET', '/v1/credits', { key: u.key })).body.credits, 400)
    t.equal((await b.req('GET', '/v1/auth/me', { key: u.key })).body.credits, 400)
  })

  t.test('per-key concurrency: a pro key never has more than 10 jobs in flight over 2 nodes', async (t) => {
    const u = await purchased(a, 100000)
    await Promise.all([a.req('GET', '/v1/credits', { key: u.key }), b.req('GET', '/v1/credits', { key: u.key })])
    const rs = await race(30, '/v1/generate/video', u, i => ({ model: 'seedance-2-mini', prompt: `busy ${i}`, resolution: '480p', duration: '6' }))
    const ok = rs.filter(r => r.status === 201).length
    t.equal(ok, 10, `exactly the cap is accepted (${rs.map(r => r.status).join(',')})`)
    t.ok(rs.filter(r => r.status !== 201).every(r => r.status === 429 && r.body.code === 'concurrency_limit_reached'), 'the rest are 429')
    const [{ n }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE key_id = ${u.keyId} AND status IN ('queued', 'submitted', 'processing')`
    t.equal(n, 10, 'ten in flight in the database')
    // A second wave while those run: all refused on either node, and nothing charged.
    const more = await race(6, '/v1/generate/video', u, i => ({ model: 'seedance-2-mini', prompt: `more ${i}`, resolution: '480p', duration: '6' }))
    t.same(more.map(r => r.status), [429, 429, 429, 429, 429, 429])
    t.equal(await dbCredits(u.id), 100000 - 10 * 50)
  })

  t.test('per-key concurrency: refusals hold no slot; a cancelled job frees its slot on every node', async (t) => {
    // Refused by the balance (402) after the slot check, and by the provider ([sim:reject],
    // 502; two per node stay under the circuit breaker's threshold): no slot is kept.
    const u = await purchased(a, 10)
    const poor = await race(12, '/v1/generate/video', u, i => ({ model: 'seedance-2-mini', prompt: `poor ${i}`, resolution: '480p', duration: '6' }))
    t.ok(poor.every(r => r.status === 402), `all 402 (${poor.map(r => r.status).join(',')})`)
    t.equal((await a.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 100000 } })).status, 201)
    const rejected = await race(4, '/v1/generate/video', u, i => ({ model: 'seedance-2-mini', prompt: `[sim:reject] ${i}`, resolution: '480p', duration: '6' }))
    t.ok(rejected.every(r => r.status === 502), `all refused by the provider (${rejected.map(r => r.status).join(',')})`)
    // Fill the cap with jobs the provider holds queued ([sim:queue]): cancellable.
    const queued = await race(10, '/v1/generate/video', u, i => ({ model: 'seedance-2-mini', prompt: `[sim:queue] ${i}`, resolution: '480p', duration: '6' }))
    t.equal(queued.filter(r => r.status === 201).length, 10, `the full cap is available after the refusals (${queued.map(r => r.status + ' ' + (r.body?.code ?? '')).join(',')})`)
    const over = await b.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'seedance-2-mini', prompt: 'over', resolution: '480p', duration: '6' } })
    t.equal(over.status, 429)
    // Cancel two on node B (node A created one of them): two slots free on both nodes.
    const ids = [queued[0].body.id, queued[1].body.id]
    for (const id of ids) t.equal((await b.req('DELETE', `/v1/jobs/${id}`, { key: u.key })).status, 200)
    const next = await race(4, '/v1/generate/video', u, i => ({ model: 'seedance-2-mini', prompt: `next ${i}`, resolution: '480p', duration: '6' }))
    t.same(next.map(r => r.status).sort(), [201, 201, 429, 429], 'exactly the two freed slots are taken')
  })
}
