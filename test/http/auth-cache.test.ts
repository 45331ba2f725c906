// The Authenticator's key and account cache (src/http/auth.ts): refresh-ahead keeps hot
// credentials off PostgreSQL without ever using an entry older than its TTL.
import t from 'tap'
import postgres from 'postgres'
import { connect } from '../../src/db/connect.js'
import { Authenticator } from '../../src/http/auth.js'
import type { Route } from '../../src/http/route.js'
import type { ApiError } from '../../src/errors.js'
import { ADMIN_TOKEN, createUser, JWT_SECRET, startServer } from '../helpers/server.js'

const s = await startServer(t)
const db = postgres(s.databaseUrl, { max: 1, onnotice: () => {} })
const sql = connect(s.databaseUrl, { max: 2 })
t.teardown(async () => { await db.end(); await sql.end() })

const route = { method: 'GET', path: '/x', auth: 'key', scope: 'read' } as unknown as Route
const sleep = (ms: number) => new Promise(resolve => setTimeout(resolve, ms))
const call = (a: Authenticator, key: string) => a.authenticate(route, { 'x-api-key': key }, new URLSearchParams())
const outcome = (p: Promise<unknown>) => p.then(() => 'ok', (e: ApiError) => e.code)

t.test('a key used past half its TTL is reloaded in the background: a revocation elsewhere is seen before the TTL ends', async (t) => {
  const u = await createUser(s)
  const a = new Authenticator(sql, JWT_SECRET, ADMIN_TOKEN, 400)
  t.equal((await call(a, u.key)).accountId, u.id)
  await db`UPDATE api_keys SET revoked_at = now() WHERE id = ${u.keyId}` // as another node would
  await sleep(250) // past half the TTL, not past the TTL
  t.equal((await call(a, u.key)).accountId, u.id, 'answered from the cache while the reload runs')
  await sleep(100)
  t.equal(await outcome(call(a, u.key)), 'INVALID_API_KEY', 'the reloaded entry is used, well inside the TTL')
})

t.test('an entry not used within its TTL is reloaded before use', async (t) => {
  const u = await createUser(s)
  const a = new Authenticator(sql, JWT_SECRET, ADMIN_TOKEN, 200)
  await call(a, u.key)
  await db`UPDATE api_keys SET revoked_at = now() WHERE id = ${u.keyId}`
  await sleep(250)
  t.equal(await outcome(call(a, u.key)), 'INVALID_API_KEY')
})
