// API key management, docs/api.md "Accounts, sessions and keys" (session JWT only).
import t from 'tap'
import { hashKey } from '../../src/http/api-key.js'
import { assertError } from '../helpers/assert.js'
import { createUser, startServer, type TestUser } from '../helpers/server.js'
import { settled } from '../helpers/wait.js'

const s = await startServer(t)

const KEY_RE = /^gjs_sk_[0-9a-f]{64}$/
const ISO = (v: unknown) => typeof v === 'string' && !Number.isNaN(Date.parse(v)) && new Date(v as string).toISOString() === v

async function create (u: TestUser, body: unknown = {}) {
  return s.req('POST', '/v1/auth/keys', { jwt: u.jwt, body })
}

t.test('create answers 201 ApiKeyWithSecret: 71-char secret, 12-char prefix, name, expiry, tier free', async (t) => {
  const u = await createUser(s, { withKey: false })
  const before = Date.now()
  const r = await create(u, { name: 'ci runner', expires_in_days: 30 })
  t.equal(r.status, 201)
  const k = r.body
  t.type(k.id, 'number')
  t.equal(k.key.length, 71)
  t.match(k.key, KEY_RE, '7-character prefix + 64 hex')
  t.equal(k.key.slice(0, 7), 'gjs_sk_')
  t.equal(k.prefix, k.key.slice(0, 12))
  t.equal(k.name, 'ci runner')
  t.equal(k.tier, 'free')
  t.same(k.scopes.slice().sort(), ['generate', 'read'])
  t.ok(ISO(k.expires_at), 'expires_at is an ISO date-time')
  const exp = Date.parse(k.expires_at)
  t.ok(exp >= before + 30 * 86400_000 - 1000 && exp <= Date.now() + 30 * 86400_000 + 1000, 'expires_at = now + 30 days')
  t.type(k.message, 'string')

  const me = await s.req('GET', '/v1/auth/me', { key: k.key })
  t.equal(me.status, 200, 'the new key works')
  t.equal(me.body.user_id, u.id)

  const [row] = await s.app.services.sql<any[]>`SELECT key_hash, prefix FROM api_keys WHERE id = ${k.id}`
  t.equal(row.key_hash, hashKey(k.key), 'only the SHA-256 is stored')
  t.not(row.key_hash, k.key)

  const bare = await create(u)
  t.equal(bare.status, 201, 'body is optional')
  t.equal(bare.body.name, null)
  t.equal(bare.body.expires_at, null)
  const none = await s.req('POST', '/v1/auth/keys', { jwt: u.jwt })
  t.equal(none.status, 201, 'no body at all')
  t.not(none.body.key, bare.body.key, 'each secret is new')
})

t.test('create validation: name "" or 101 chars, expires_in_days 0 / 3651 / 1.5 / "7" answer 400 VALIDATION_ERROR', async (t) => {
  const u = await createUser(s, { withKey: false })
  const bad: Array<[string, unknown]> = [
    ['empty name', { name: '' }],
    ['101-char name', { name: 'x'.repeat(101) }],
    ['name not a string', { name: 5 }],
    ['expires_in_days 0', { expires_in_days: 0 }],
    ['expires_in_days -1', { expires_in_days: -1 }],
    ['expires_in_days 3651', { expires_in_days: 3651 }],
    ['expires_in_days 1.5', { expires_in_days: 1.5 }],
    ['expires_in_days string', { expires_in_days: '7' }],
    ['array body', []],
  ]
  for (const [name, body] of bad) {
    const r = await create(u, body)
    assertError(t, r, 400, 'VALIDATION_ERROR', name)
    t.ok(Array.isArray(r.body.details), `${name}: details`)
  }
  const edge = await create(u, { name: 'y'.repeat(100), expires_in_days: 3650 })
  t.equal(edge.status, 201, 'name of 100 and 3650 days are accepted')
  const one = await create(u, { name: 'z', expires_in_days: 1 })
  t.equal(one.status, 201, 'name of 1 and 1 day are accepted')
  const n = await s.app.services.sql<any[]>`SELECT count(*)::int AS n FROM api_keys WHERE account_id = ${u.id}`
  t.equal(n[0].n, 2, 'no key created by the failures')
})

t.test('list answers {keys, total} of masked ApiKeyViews, newest first, with no secret or hash anywhere', async (t) => {
  const u = await createUser(s, { withKey: false })
  const a = await create(u, { name: 'a' })
  const b = await create(u, { name: 'b', expires_in_days: 10 })
  const r = await s.req('GET', '/v1/auth/keys', { jwt: u.jwt })
  t.equal(r.status, 200)
  t.equal(r.body.total, 2)
  t.same(r.body.keys.map((k: any) => k.id), [b.body.id, a.body.id])
  for (const k of r.body.keys) {
    t.same(Object.keys(k).sort(), ['created_at', 'expires_at', 'id', 'last_used_at', 'name', 'prefix', 'rate_limit_rpm', 'scopes', 'tier'])
    t.equal(k.prefix.length, 12)
    t.equal(k.tier, 'free')
    t.equal(k.rate_limit_rpm, 10)
    t.equal(k.last_used_at, null)
    t.ok(ISO(k.created_at))
  }
  t.equal(r.body.keys[0].expires_at, b.body.expires_at)
  t.equal(r.body.keys[1].expires_at, null)
  for (const secret of [a.body.key, b.body.key]) {
    t.notOk(r.text.includes(secret), 'no secret in the listing')
    t.notOk(r.text.includes(secret.slice(12)), 'no secret tail in the listing')
    t.notOk(r.text.includes(hashKey(secret)), 'no hash in the listing')
  }
  const other = await createUser(s, { withKey: false })
  const o = await s.req('GET', '/v1/auth/keys', { jwt: other.jwt })
  t.same(o.body, { keys: [], total: 0 }, 'another account sees none of them')
})

t.test('rotate returns a new secret that works; the old one gets 401 INVALID_API_KEY at once', async (t) => {
  const u = await createUser(s)
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200, 'old key cached as valid')
  const r = await s.req('POST', `/v1/auth/keys/${u.keyId}/rotate`, { jwt: u.jwt })
  t.equal(r.status, 200)
  t.equal(r.body.id, u.keyId, 'same key id')
  t.match(r.body.key, KEY_RE)
  t.not(r.body.key, u.key)
  t.equal(r.body.prefix, r.body.key.slice(0, 12))
  t.equal(r.body.name, 'test')
  t.equal(r.body.tier, 'free')
  t.type(r.body.message, 'string')
  assertError(t, await s.req('GET', '/v1/auth/me', { key: u.key }), 401, 'INVALID_API_KEY', 'old secret')
  t.equal((await s.req('GET', '/v1/auth/me', { key: r.body.key })).status, 200, 'new secret works')
  const list = await s.req('GET', '/v1/auth/keys', { jwt: u.jwt })
  t.equal(list.body.total, 1, 'rotation does not add a key')
  t.equal(list.body.keys[0].prefix, r.body.prefix)
})

t.test('rotate: revoked 409 KEY_REVOKED, unknown or foreign 404 KEY_NOT_FOUND, non-integer 400 INVALID_PARAM', async (t) => {
  const u = await createUser(s)
  const other = await createUser(s)
  t.equal((await s.req('DELETE', `/v1/auth/keys/${u.keyId}`, { jwt: u.jwt })).status, 200)
  assertError(t, await s.req('POST', `/v1/auth/keys/${u.keyId}/rotate`, { jwt: u.jwt }), 409, 'KEY_REVOKED')
  assertError(t, await s.req('POST', '/v1/auth/keys/999999999/rotate', { jwt: u.jwt }), 404, 'KEY_NOT_FOUND', 'unknown')
  assertError(t, await s.req('POST', `/v1/auth/keys/${other.keyId}/rotate`, { jwt: u.jwt }), 404, 'KEY_NOT_FOUND', 'another account\'s key')
  t.equal((await s.req('GET', '/v1/auth/me', { key: other.key })).status, 200, 'the other account\'s key is untouched')
  for (const bad of ['abc', '1.5', '-1', '0', '1e3', '01', '%20', '99999999999999999999']) {
    const r = await s.req('POST', `/v1/auth/keys/${bad}/rotate`, { jwt: u.jwt })
    assertError(t, r, 400, 'INVALID_PARAM', `keyId ${bad}`)
    t.equal(r.body.param, 'keyId')
  }
})

t.test('revoke answers 200 {revoked: true, id}; again 404 KEY_NOT_FOUND; the key stops working at once', async (t) => {
  const u = await createUser(s)
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200)
  const r = await s.req('DELETE', `/v1/auth/keys/${u.keyId}`, { jwt: u.jwt })
  t.equal(r.status, 200)
  t.same(r.body, { revoked: true, id: u.keyId })
  assertError(t, await s.req('GET', '/v1/auth/me', { key: u.key }), 401, 'INVALID_API_KEY', 'revoked key')
  assertError(t, await s.req('DELETE', `/v1/auth/keys/${u.keyId}`, { jwt: u.jwt }), 404, 'KEY_NOT_FOUND', 'already revoked')
  assertError(t, await s.req('DELETE', '/v1/auth/keys/424242424', { jwt: u.jwt }), 404, 'KEY_NOT_FOUND', 'unknown')
  assertError(t, await s.req('DELETE', '/v1/auth/keys/abc', { jwt: u.jwt }), 400, 'INVALID_PARAM', 'non-integer')
  const list = await s.req('GET', '/v1/auth/keys', { jwt: u.jwt })
  t.same(list.body, { keys: [], total: 0 }, 'revoked keys are not listed')
  const [row] = await s.app.services.sql<any[]>`SELECT revoked_at FROM api_keys WHERE id = ${u.keyId}`
  t.ok(row.revoked_at instanceof Date, 'soft revoke keeps the row')

  const other = await createUser(s)
  assertError(t, await s.req('DELETE', `/v1/auth/keys/${other.keyId}`, { jwt: u.jwt }), 404, 'KEY_NOT_FOUND', 'another account\'s key')
  t.equal((await s.req('GET', '/v1/auth/me', { key: other.key })).status, 200, 'still works')
})

t.test('at most 5 active keys: the 6th answers 409 KEY_LIMIT_REACHED; revoking frees a slot', async (t) => {
  const u = await createUser(s, { withKey: false })
  const ids: number[] = []
  for (let i = 0; i < 5; i++) {
    const r = await create(u, { name: `k${i}` })
    t.equal(r.status, 201, `key ${i + 1}`)
    ids.push(r.body.id)
  }
  assertError(t, await create(u), 409, 'KEY_LIMIT_REACHED')
  t.equal((await s.req('POST', `/v1/auth/keys/${ids[0]}/rotate`, { jwt: u.jwt })).status, 200, 'rotating at the limit is fine')
  t.equal((await s.req('DELETE', `/v1/auth/keys/${ids[0]}`, { jwt: u.jwt })).status, 200)
  t.equal((await create(u)).status, 201, 'a revoked key frees its slot')
  assertError(t, await create(u), 409, 'KEY_LIMIT_REACHED', 'full again')
  // An expired key is not active.
  await s.app.services.sql`UPDATE api_keys SET expires_at = now() - interval '1 minute' WHERE id = ${ids[1]}`
  t.equal((await create(u)).status, 201, 'an expired key frees its slot')
})

t.test('10 concurrent creations on an empty account: exactly 5 succeed, the rest 409 KEY_LIMIT_REACHED', async (t) => {
  const u = await createUser(s, { withKey: false })
  const rs = await Promise.all(Array.from({ length: 10 }, (_, i) => create(u, { name: `c${i}` })))
  const ok = rs.filter(r => r.status === 201)
  const limited = rs.filter(r => r.status === 409)
  t.equal(ok.length, 5)
  t.equal(limited.length, 5)
  for (const r of limited) t.equal(r.body.code, 'KEY_LIMIT_REACHED')
  const n = await s.app.services.sql<any[]>`SELECT count(*)::int AS n FROM api_keys WHERE account_id = ${u.id} AND revoked_at IS NULL`
  t.equal(n[0].n, 5)
})

t.test('NOT_ELIGIBLE: unverified email, credits_locked and banned, with reason and reasons', async (t) => {
  const unverified = await createUser(s, { verified: false })
  let r = await create(unverified)
  assertError(t, r, 403, 'NOT_ELIGIBLE', 'unverified')
  t.equal(r.body.reason, 'email_unverified')
  t.same(r.body.reasons, ['email_unverified'])

  const locked = await createUser(s, { withKey: false })
  t.equal((await s.req('PATCH', `/v1/admin/accounts/${locked.id}`, { admin: true, body: { credits_locked: true } })).status, 200)
  r = await create(locked)
  assertError(t, r, 403, 'NOT_ELIGIBLE', 'credits locked')
  t.equal(r.body.reason, 'credits_locked')
  t.same(r.body.reasons, ['credits_locked'])

  const banned = await createUser(s, { withKey: false })
  t.equal((await s.req('PATCH', `/v1/admin/accounts/${banned.id}`, { admin: true, body: { banned: true, credits_locked: true, email_verified: false } })).status, 200)
  r = await create(banned)
  assertError(t, r, 403, 'NOT_ELIGIBLE', 'banned')
  t.same(r.body.reasons.slice().sort(), ['account_banned', 'credits_locked', 'email_unverified'])
  t.ok(r.body.reasons.includes(r.body.reason), 'reason is one of reasons')

  t.equal((await s.req('PATCH', `/v1/admin/accounts/${unverified.id}`, { admin: true, body: { email_verified: true } })).status, 200)
  t.equal((await create(unverified)).status, 201, 'eligible once verified')
})

t.test('an API key calling any /auth/keys route answers 403 insufficient_scope', async (t) => {
  const u = await createUser(s)
  const calls: Array<[string, string]> = [
    ['POST', '/v1/auth/keys'],
    ['GET', '/v1/auth/keys'],
    ['POST', `/v1/auth/keys/${u.keyId}/rotate`],
    ['DELETE', `/v1/auth/keys/${u.keyId}`],
  ]
  for (const [method, path] of calls) {
    const a = await s.req(method, path, { key: u.key, body: method === 'POST' ? {} : undefined })
    assertError(t, a, 403, 'insufficient_scope', `${method} ${path} (X-API-Key)`)
    const b = await s.req(method, path, { headers: { authorization: `Bearer ${u.key}` }, body: method === 'POST' ? {} : undefined })
    assertError(t, b, 403, 'insufficient_scope', `${method} ${path} (Bearer key)`)
  }
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200, 'the key was neither rotated nor revoked')
})

t.test('tier: pro after an operator purchase on next use (header, listing, create/rotate), enterprise by flag', async (t) => {
  const u = await createUser(s)
  const a = await s.req('GET', '/v1/auth/me', { key: u.key })
  t.equal(a.headers.get('x-ratelimit-limit'), '10', 'free: 10 rpm')
  t.equal((await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 600, currency: 'USD', amount: 5 } })).status, 201)

  const b = await s.req('GET', '/v1/auth/me', { key: u.key })
  t.equal(b.status, 200)
  t.equal(b.headers.get('x-ratelimit-limit'), '30', 'pro on next use: 30 rpm')
  t.equal(b.body.credits, 800)
  const list = await s.req('GET', '/v1/auth/keys', { jwt: u.jwt })
  t.equal(list.body.keys[0].tier, 'pro')
  t.equal(list.body.keys[0].rate_limit_rpm, 30)
  const created = await create(u, { name: 'second' })
  t.equal(created.body.tier, 'pro', 'ApiKeyWithSecret on create')
  const rotated = await s.req('POST', `/v1/auth/keys/${u.keyId}/rotate`, { jwt: u.jwt })
  t.equal(rotated.body.tier, 'pro', 'ApiKeyWithSecret on rotate')

  t.equal((await s.req('PATCH', `/v1/admin/accounts/${u.id}`, { admin: true, body: { enterprise: true } })).status, 200)
  const c = await s.req('GET', '/v1/auth/me', { key: rotated.body.key })
  t.equal(c.headers.get('x-ratelimit-limit'), '100', 'enterprise: 100 rpm')
  const list2 = await s.req('GET', '/v1/auth/keys', { jwt: u.jwt })
  t.same(list2.body.keys.map((k: any) => k.tier), ['enterprise', 'enterprise'])
  t.same(list2.body.keys.map((k: any) => k.rate_limit_rpm), [100, 100])

  const e = await createUser(s, { withKey: false })
  t.equal((await s.req('PATCH', `/v1/admin/accounts/${e.id}`, { admin: true, body: { enterprise: true } })).status, 200)
  t.equal((await create(e)).body.tier, 'enterprise', 'enterprise without a purchase')
})

t.test('last_used_at is null until the key is used, then set (flushed by metering)', async (t) => {
  const u = await createUser(s)
  const before = Date.now()
  let list = await s.req('GET', '/v1/auth/keys', { jwt: u.jwt })
  t.equal(list.body.keys[0].last_used_at, null)
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200)
  await s.app.services.metering.flush()
  const [row] = await s.app.services.sql<any[]>`SELECT last_used_at FROM api_keys WHERE id = ${u.keyId}`
  t.ok(row.last_used_at instanceof Date, 'stored by the metering flush')
  t.ok(row.last_used_at.getTime() >= before - 5 && row.last_used_at.getTime() <= Date.now() + 5)
  list = await s.req('GET', '/v1/auth/keys', { jwt: u.jwt })
  t.ok(ISO(list.body.keys[0].last_used_at))
  t.equal(Date.parse(list.body.keys[0].last_used_at), row.last_used_at.getTime())
  // Without an explicit flush the 1 s metering timer writes it.
  const v = await createUser(s)
  await s.req('GET', '/v1/auth/me', { key: v.key })
  const started = Date.now()
  const [row2] = await settled(() => s.app.services.sql<any[]>`SELECT last_used_at FROM api_keys WHERE id = ${v.keyId}`, ([r]) => r.last_used_at !== null, { timeoutMs: 3000, everyMs: 50 })
  t.ok(row2.last_used_at instanceof Date, `flushed by the timer (seen after ${Date.now() - started} ms)`)
})

t.test('rotate: an account that may not create keys gets no new secret either (403 NOT_ELIGIBLE); the old secret is kept', async (t) => {
  const u = await createUser(s)
  t.equal((await s.req('PATCH', `/v1/admin/accounts/${u.id}`, { admin: true, body: { credits_locked: true } })).status, 200)
  const r = await s.req('POST', `/v1/auth/keys/${u.keyId}/rotate`, { jwt: u.jwt })
  assertError(t, r, 403, 'NOT_ELIGIBLE', 'credits locked')
  t.same(r.body.reasons, ['credits_locked'])
  t.equal(r.body.key, undefined, 'no secret in the answer')
  t.equal((await s.req('PATCH', `/v1/admin/accounts/${u.id}`, { admin: true, body: { credits_locked: false } })).status, 200)
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200, 'the old secret still works')
  t.equal((await s.req('POST', `/v1/auth/keys/${u.keyId}/rotate`, { jwt: u.jwt })).status, 200, 'eligible again: rotated')
})

t.test('a JSON body of null is not an object: 400 VALIDATION_ERROR, no key created', async (t) => {
  const u = await createUser(s)
  const r = await s.req('POST', '/v1/auth/keys', { jwt: u.jwt, raw: 'null', headers: { 'content-type': 'application/json' } })
  assertError(t, r, 400, 'VALIDATION_ERROR')
  t.equal((await s.req('GET', '/v1/auth/keys', { jwt: u.jwt })).body.total, 1, 'still the one key')
})
