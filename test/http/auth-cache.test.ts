// The Authenticator's key and account cache (src/http/auth.ts): refresh-ahead keeps hot
// credentials off PostgreSQL without ever using an entry older than its TTL.
import t from 'tap'
import postgres from 'postgres'
import { connect } from '../../src/db/connect.js'
import { Authenticator } from '../../src/http/auth.js'
import { hashKey } from '../../src/http/api-key.js'
import type { Route } from '../../src/http/route.js'
import type { ApiError } from '../../src/errors.js'
import { ADMIN_TOKEN, createUser, JWT_SECRET, startServer } from '../helpers/server.js'
import { sleep, waitFor } from '../helpers/wait.js'

const s = await startServer(t)
const db = postgres(s.databaseUrl, { max: 1, onnotice: () => {} })
const sql = connect(s.databaseUrl, { max: 2 })
t.teardown(async () => { await db.end(); await sql.end() })

const route = { method: 'GET', path: '/x', auth: 'key', scope: 'read' } as unknown as Route
const call = (a: Authenticator, key: string) => a.authenticate(route, { 'x-api-key': key }, new URLSearchParams())
const outcome = (p: Promise<unknown>) => p.then(() => 'ok', (e: ApiError) => e.code)

t.test('a key used past half its TTL is reloaded in the background: a revocation elsewhere is seen before the TTL ends', async (t) => {
  const u = await createUser(s)
  // A TTL long enough that a loaded machine does not turn the check into a race (the reload is
  // one indexed SELECT); the revocation must be seen before the TTL ends, not just after it.
  const ttl = 4000
  const a = new Authenticator(sql, JWT_SECRET, ADMIN_TOKEN, ttl)
  const loadedAt = Date.now()
  t.equal((await call(a, u.key)).accountId, u.id)
  await db`UPDATE api_keys SET revoked_at = now() WHERE id = ${u.keyId}` // as another node would
  await sleep(ttl / 2 + 100) // time: the TTL is under test (past half of it, not past it)
  t.equal((await call(a, u.key)).accountId, u.id, 'answered from the cache while the reload runs')
  const seenAt = await waitFor(async () => await outcome(call(a, u.key)) === 'INVALID_API_KEY' && Date.now(),
    { what: 'the background reload to see the revocation', timeoutMs: ttl, everyMs: 20 }).catch(() => 0)
  t.ok(seenAt > 0 && seenAt - loadedAt < ttl, `the reloaded entry is used inside the TTL (seen after ${seenAt ? seenAt - loadedAt : 'never'} ms of ${ttl})`)
})

t.test('an entry not used within its TTL is reloaded before use', async (t) => {
  const u = await createUser(s)
  const a = new Authenticator(sql, JWT_SECRET, ADMIN_TOKEN, 200)
  await call(a, u.key)
  await db`UPDATE api_keys SET revoked_at = now() WHERE id = ${u.keyId}`
  await sleep(250) // time: the 200 ms TTL running out is under test
  t.equal(await outcome(call(a, u.key)), 'INVALID_API_KEY')
})

t.test('requests that find one key expired share one reload (a burst after an idle spell), and an invalidation is never answered from a load that predates it', async (t) => {
  const u = await createUser(s)
  let selects = 0
  const counting = ((strings: TemplateStringsArray, ...args: unknown[]) => { selects++; return (sql as any)(strings, ...args) }) as unknown as typeof sql
  const a = new Authenticator(counting, JWT_SECRET, ADMIN_TOKEN, 200)
  const burst = async () => (await Promise.all(Array.from({ length: 50 }, () => call(a, u.key)))).map(c => c.accountId)
  t.same(await burst(), Array(50).fill(u.id))
  t.equal(selects, 2, 'one key SELECT and one account SELECT for 50 concurrent requests on a cold cache')
  await sleep(250) // time: both 200 ms entries expire (the TTL is under test)
  selects = 0
  t.same(await burst(), Array(50).fill(u.id))
  t.equal(selects, 2, 'the same after expiry')

  // A revocation on this node while a reload is in flight: requests after it wait for a new load.
  await sleep(250) // time: the entries expire again, so the next call starts a reload
  selects = 0
  const before = call(a, u.key)
  await db`UPDATE api_keys SET revoked_at = now() WHERE id = ${u.keyId}`
  a.invalidateKey(hashKey(u.key), false)
  t.equal(await outcome(call(a, u.key)), 'INVALID_API_KEY', 'a request after the invalidation sees the revocation')
  await before.catch(() => {})
  t.equal(await outcome(call(a, u.key)), 'INVALID_API_KEY', 'the earlier load did not put the old record back')
})
