import t from 'tap'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { startServer, createUser } from '../helpers/server.js'
import { assertError } from '../helpers/assert.js'
import { openSse } from '../helpers/sse.js'
import { settled } from '../helpers/wait.js'

const REDIS_URL = process.env.REDIS_URL_TEST || process.env.REDIS_URL || 'redis://127.0.0.1:6379'

async function redisUp (): Promise<boolean> {
  const r = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  try { await r.connect(); await r.ping(); return true } catch { return false } finally { r.disconnect() }
}

if (!(await redisUp())) {
  t.test('two nodes share rate windows, caches and job events through Redis', { skip: `Redis is not reachable at ${REDIS_URL}` }, () => {})
} else {
  // Two nodes of one deployment: one database, one Redis namespace.
  const env = {
    REDIS_URL,
    REDIS_PREFIX: `gjt${randomBytes(4).toString('hex')}`,
    SIM_SPEED: '50',
    TIER_LIMITS: JSON.stringify({ free: { rpm: 6 }, pro: { rpm: 100000, max_concurrent: 1000 } }),
  }
  const a = await startServer(t, env)
  const b = await startServer(t, { ...env, DATABASE_URL: a.databaseUrl })

  t.test('the per-key rate window is shared: requests on node A count on node B', async (t) => {
    const u = await createUser(a, { credits: 500 })
    for (let i = 0; i < 3; i++) t.equal((await a.req('GET', '/v1/auth/me', { key: u.key })).status, 200)
    for (let i = 0; i < 3; i++) {
      const r = await b.req('GET', '/v1/auth/me', { key: u.key })
      t.equal(r.status, 200)
      t.equal(r.headers.get('x-ratelimit-remaining'), String(2 - i), 'remaining counts both nodes')
    }
    const over = await b.req('GET', '/v1/auth/me', { key: u.key })
    assertError(t, over, 429, 'RATE_LIMIT_EXCEEDED')
    t.ok(Number(over.headers.get('retry-after')) >= 1)
  })

  t.test('a key revoked on node A stops working on node B at once', async (t) => {
    const u = await createUser(a, { credits: 500 })
    await a.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 100 } })
    t.equal((await b.req('GET', '/v1/credits', { key: u.key })).status, 200, 'B has the key cached')
    t.equal((await a.req('DELETE', `/v1/auth/keys/${u.keyId}`, { jwt: u.jwt })).status, 200)
    // Over Redis, long before the key cache's TTL: within a second.
    assertError(t, await settled(() => b.req('GET', '/v1/credits', { key: u.key }), r => r.status === 401, { timeoutMs: 1000 }), 401, 'INVALID_API_KEY')
  })

  t.test('an SSE stream on node B follows a job run by node A', async (t) => {
    const u = await createUser(a, { credits: 5000 })
    await a.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 100 } })
    const job = await a.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'gpt-image-2.5', prompt: 'two nodes', resolution: '4K' } })
    t.equal(job.status, 201)
    const st = await openSse(`${b.url}/v1/sse/jobs/${job.body.id}`, { 'x-api-key': u.key })
    t.equal(st.status, 200)
    await st.closed
    const last = st.events.filter(e => e.event === 'status').pop()!
    t.equal(JSON.parse(last.data).status, 'completed')
    t.equal(st.events[st.events.length - 1].event, 'done')
    const onB = await b.req('GET', `/v1/jobs/${job.body.id}`, { key: u.key })
    t.equal(onB.body.status, 'completed')
  })

  t.test('a balance spent on node A is seen by node B before it refuses or charges', async (t) => {
    const u = await createUser(a, { credits: 25 })
    await a.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 5 } })
    // Both nodes load the account (30 credits).
    t.equal((await a.req('GET', '/v1/credits', { key: u.key })).body.credits, 30)
    t.equal((await b.req('GET', '/v1/credits', { key: u.key })).body.credits, 30)
    t.equal((await a.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'one' } })).status, 201)
    t.equal((await a.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'two' } })).status, 201)
    // B still believes 30: its charge is refused by the conditional UPDATE only if overspent.
    t.equal((await b.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'three' } })).status, 201)
    assertError(t, await b.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'four' } }), 402, 'INSUFFICIENT_CREDITS')
    assertError(t, await a.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'five' } }), 402, 'INSUFFICIENT_CREDITS')
    const [{ credits, sum }] = await a.app.services.sql<{ credits: number; sum: number }[]>`
      SELECT a.credits, (SELECT coalesce(sum(delta), 0)::bigint FROM credit_entries WHERE account_id = a.id) AS sum FROM accounts a WHERE id = ${u.id}`
    t.equal(credits, 0)
    t.equal(Number(sum), 0, 'ledger matches')
  })
}
