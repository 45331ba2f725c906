// Sessions (docs/api.md "Endpoints"), GET /v1/auth/me and every credential failure code of
// docs/api.md "Accounts, sessions and keys", against the real server and PostgreSQL.
import t from 'tap'
import { createHmac } from 'node:crypto'
import { hashKey } from '../../src/http/api-key.js'
import { signSession } from '../../src/http/jwt.js'
import type { Route } from '../../src/http/route.js'
import { ApiError } from '../../src/errors.js'
import { assertError } from '../helpers/assert.js'
import { createUser, JWT_SECRET, startServer } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

const s = await startServer(t)

let seq = 0
const email = (tag: string) => `auth_${tag}_${process.pid}_${++seq}@example.com`
const b64 = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url')

/** A JWT with arbitrary header and claims, signed with `secret` (HS256 MAC whatever `alg` says). */
function forge (header: unknown, claims: unknown, secret = JWT_SECRET): string {
  const body = `${b64(header)}.${b64(claims)}`
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`
}

t.test('signup answers 201 {user_id, email, email_verified: false, next}, grants 200 credits as a ledger entry, leaves the email unverified', async (t) => {
  const e = email('signup')
  const r = await s.req('POST', '/v1/auth/signup', { body: { email: e, password: 'long enough pw' } })
  t.equal(r.status, 201)
  t.type(r.body.user_id, 'number')
  t.equal(r.body.email, e)
  t.same(Object.keys(r.body).sort(), ['email', 'email_verified', 'next', 'user_id'], 'plus what to do next')

  const sql = s.app.services.sql
  const [acct] = await sql<any[]>`SELECT credits, email_verified, has_purchased, banned FROM accounts WHERE id = ${r.body.user_id}`
  t.equal(acct.credits, 200)
  t.equal(acct.email_verified, false)
  t.equal(acct.has_purchased, false)
  const entries = await sql<any[]>`SELECT delta, kind FROM credit_entries WHERE account_id = ${r.body.user_id}`
  t.same(entries.map(e => ({ delta: Number(e.delta), kind: e.kind })), [{ delta: 200, kind: 'grant' }])

  const login = await s.req('POST', '/v1/auth/login', { body: { email: e, password: 'long enough pw' } })
  t.equal(login.status, 200)
  const me = await s.req('GET', '/v1/auth/me', { jwt: login.body.token })
  t.same(me.body, { user_id: r.body.user_id, email: e, credits: 200 })

  // Unverified: no API keys yet (NOT_ELIGIBLE is covered in keys.test.ts).
  const k = await s.req('POST', '/v1/auth/keys', { jwt: login.body.token, body: {} })
  assertError(t, k, 403, 'NOT_ELIGIBLE')
})

t.test('signup with an email already taken (any case) answers 409 CONFLICT', async (t) => {
  const e = email('dup')
  t.equal((await s.req('POST', '/v1/auth/signup', { body: { email: e, password: 'long enough pw' } })).status, 201)
  assertError(t, await s.req('POST', '/v1/auth/signup', { body: { email: e, password: 'another password' } }), 409, 'CONFLICT')
  assertError(t, await s.req('POST', '/v1/auth/signup', { body: { email: e.toUpperCase(), password: 'another password' } }), 409, 'CONFLICT', 'upper case')
  const n = await s.app.services.sql<any[]>`SELECT count(*)::int AS n FROM accounts WHERE lower(email) = lower(${e})`
  t.equal(n[0].n, 1, 'one account')
})

t.test('signup validation failures answer 400 VALIDATION_ERROR with details', async (t) => {
  const bad: Array<[string, unknown]> = [
    ['no body', undefined],
    ['empty object', {}],
    ['bad email', { email: 'nope', password: 'long enough pw' }],
    ['short password', { email: email('v'), password: 'short' }],
    ['password too long', { email: email('v'), password: 'x'.repeat(201) }],
    ['email not a string', { email: 42, password: 'long enough pw' }],
    ['array body', [1, 2]],
    ['string body', 'hello'],
  ]
  for (const [name, body] of bad) {
    const r = await s.req('POST', '/v1/auth/signup', body === undefined ? {} : { body })
    assertError(t, r, 400, 'VALIDATION_ERROR', name)
    t.ok(Array.isArray(r.body.details) && r.body.details.length > 0, `${name}: details`)
  }
})

t.test('login returns a Bearer token that works; wrong password and unknown email answer 401 INVALID_CREDENTIALS', async (t) => {
  const u = await createUser(s)
  const r = await s.req('POST', '/v1/auth/login', { body: { email: u.email, password: u.password } })
  t.equal(r.status, 200)
  t.equal(r.body.token_type, 'Bearer')
  t.equal(r.body.expires_in, 24 * 3600)
  t.equal(r.body.token.split('.').length, 3)
  const claims = JSON.parse(Buffer.from(r.body.token.split('.')[1], 'base64url').toString())
  t.equal(claims.sub, String(u.id))
  t.type(claims.iat, 'number')
  const me = await s.req('GET', '/v1/auth/me', { jwt: r.body.token })
  t.equal(me.status, 200)
  t.equal(me.body.user_id, u.id)

  const upper = await s.req('POST', '/v1/auth/login', { body: { email: u.email.toUpperCase(), password: u.password } })
  t.equal(upper.status, 200, 'email is case-insensitive')

  assertError(t, await s.req('POST', '/v1/auth/login', { body: { email: u.email, password: 'wrong password' } }), 401, 'INVALID_CREDENTIALS', 'wrong password')
  assertError(t, await s.req('POST', '/v1/auth/login', { body: { email: email('ghost'), password: u.password } }), 401, 'INVALID_CREDENTIALS', 'unknown email')
  assertError(t, await s.req('POST', '/v1/auth/login', { body: { email: u.email } }), 400, 'VALIDATION_ERROR', 'missing password')
})

t.test('POST /v1/auth/password: old JWTs then get 401 PASSWORD_CHANGED, the returned and new tokens work', async (t) => {
  const u = await createUser(s)
  const login = await s.req('POST', '/v1/auth/login', { body: { email: u.email, password: u.password } })
  const old = login.body.token
  // The change must come after the token's issue time (same clock: the server runs in this process).
  const issuedMs = JSON.parse(Buffer.from(old.split('.')[1], 'base64url').toString()).iat_ms
  await waitFor(() => Date.now() > issuedMs, { what: "the clock to pass the old token's iat_ms", everyMs: 1 })

  assertError(t, await s.req('POST', '/v1/auth/password', { jwt: old, body: { current_password: 'not it at all', new_password: 'brand new password' } }), 401, 'INVALID_CREDENTIALS', 'wrong current password')
  t.equal((await s.req('GET', '/v1/auth/me', { jwt: old })).status, 200, 'a wrong attempt changes nothing')
  assertError(t, await s.req('POST', '/v1/auth/password', { jwt: old, body: { current_password: u.password, new_password: 'short' } }), 400, 'VALIDATION_ERROR', 'new password too short')

  const ch = await s.req('POST', '/v1/auth/password', { jwt: old, body: { current_password: u.password, new_password: 'brand new password' } })
  t.equal(ch.status, 200)
  t.equal(ch.body.changed, true)
  t.equal(ch.body.token_type, 'Bearer')

  assertError(t, await s.req('GET', '/v1/auth/me', { jwt: old }), 401, 'PASSWORD_CHANGED', 'login token from before')
  assertError(t, await s.req('GET', '/v1/auth/me', { jwt: u.jwt }), 401, 'PASSWORD_CHANGED', 'helper token from before')
  assertError(t, await s.req('GET', '/v1/auth/keys', { jwt: old }), 401, 'PASSWORD_CHANGED', 'on a session route too')
  t.equal((await s.req('GET', '/v1/auth/me', { jwt: ch.body.token })).status, 200, 'token returned by the change works')

  assertError(t, await s.req('POST', '/v1/auth/login', { body: { email: u.email, password: u.password } }), 401, 'INVALID_CREDENTIALS', 'old password')
  const fresh = await s.req('POST', '/v1/auth/login', { body: { email: u.email, password: 'brand new password' } })
  t.equal(fresh.status, 200)
  t.equal((await s.req('GET', '/v1/auth/me', { jwt: fresh.body.token })).status, 200, 'new login works')
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200, 'API keys are not sessions: they keep working')
})

t.test('GET /v1/auth/me works with X-API-Key, Authorization: Bearer <key> and a session JWT', async (t) => {
  const u = await createUser(s, { credits: 345 })
  const want = { user_id: u.id, email: u.email, credits: 345 }
  const a = await s.req('GET', '/v1/auth/me', { key: u.key })
  t.equal(a.status, 200)
  t.same(a.body, want)
  const b = await s.req('GET', '/v1/auth/me', { headers: { authorization: `Bearer ${u.key}` } })
  t.equal(b.status, 200)
  t.same(b.body, want)
  const c = await s.req('GET', '/v1/auth/me', { jwt: u.jwt })
  t.equal(c.status, 200)
  t.same(c.body, want)
  const d = await s.req('GET', '/v1/auth/me', { headers: { authorization: `bearer ${u.key}` } })
  t.equal(d.status, 200, 'the scheme name is case-insensitive')
})

t.test('AUTH_REQUIRED when no credential is sent', async (t) => {
  assertError(t, await s.req('GET', '/v1/auth/me'), 401, 'AUTH_REQUIRED', 'nothing')
  assertError(t, await s.req('GET', '/v1/auth/me', { headers: { 'x-api-key': '' } }), 401, 'AUTH_REQUIRED', 'empty X-API-Key')
  assertError(t, await s.req('GET', '/v1/auth/me', { headers: { authorization: 'Basic dXNlcjpwYXNz' } }), 401, 'AUTH_REQUIRED', 'Basic scheme')
  assertError(t, await s.req('GET', '/v1/auth/me', { headers: { authorization: 'Bearer' } }), 401, 'AUTH_REQUIRED', 'Bearer without a token')
  assertError(t, await s.req('GET', '/v1/auth/keys'), 401, 'AUTH_REQUIRED', 'session route')
})

t.test('INVALID_API_KEY for a malformed, unknown or revoked key', async (t) => {
  const u = await createUser(s)
  const unknown = 'gjs_sk_' + 'a'.repeat(64)
  const cases: Array<[string, Record<string, string>]> = [
    ['too short', { 'x-api-key': 'gjs_sk_abc' }],
    ['wrong prefix', { 'x-api-key': 'sk_live_' + 'a'.repeat(63) }],
    ['upper-case hex', { 'x-api-key': 'gjs_sk_' + 'A'.repeat(64) }],
    ['one char too long', { 'x-api-key': u.key + '0' }],
    ['unknown', { 'x-api-key': unknown }],
    ['unknown as Bearer', { authorization: `Bearer ${unknown}` }],
    ['malformed as Bearer', { authorization: 'Bearer gjs_sk_zz' }],
  ]
  for (const [name, headers] of cases) assertError(t, await s.req('GET', '/v1/auth/me', { headers }), 401, 'INVALID_API_KEY', name)

  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200)
  t.equal((await s.req('DELETE', `/v1/auth/keys/${u.keyId}`, { jwt: u.jwt })).status, 200)
  assertError(t, await s.req('GET', '/v1/auth/me', { key: u.key }), 401, 'INVALID_API_KEY', 'revoked')
})

t.test('KEY_EXPIRED for a key past its expiry', async (t) => {
  const u = await createUser(s)
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200)
  await s.app.services.sql`UPDATE api_keys SET expires_at = now() - interval '1 day' WHERE id = ${u.keyId}`
  s.app.services.auth.invalidateKey(hashKey(u.key))
  assertError(t, await s.req('GET', '/v1/auth/me', { key: u.key }), 401, 'KEY_EXPIRED')
  assertError(t, await s.req('GET', '/v1/auth/me', { headers: { authorization: `Bearer ${u.key}` } }), 401, 'KEY_EXPIRED', 'as Bearer')
})

t.test('TOKEN_MALFORMED for bearer tokens that are not structurally JWTs', async (t) => {
  const u = await createUser(s, { withKey: false })
  const good = signSession(JWT_SECRET, u.id).token
  const [h, p, sig] = good.split('.')
  const cases: Array<[string, string]> = [
    ['one part', 'abcdef'],
    ['two parts', `${h}.${p}`],
    ['four parts', `${good}.${sig}`],
    ['empty header part', `.${p}.${sig}`],
    ['bad base64 characters', `${h}.${p}$.${sig}`],
    ['standard base64 with +/', `${h}.${p}+/.${sig}`],
    ['header is not JSON', `${b64('not json')}.${p}.${sig}`],
    ['claims are not JSON', `${h}.${b64('{"sub": ')}.${sig}`],
    ['claims are a JSON array', `${h}.${b64([1, 2])}.${sig}`],
    ['claims are a JSON string', `${h}.${b64('"x"')}.${sig}`],
  ]
  for (const [name, token] of cases) assertError(t, await s.req('GET', '/v1/auth/me', { jwt: token }), 401, 'TOKEN_MALFORMED', name)
  assertError(t, await s.req('GET', '/v1/auth/keys', { jwt: 'a.b' }), 401, 'TOKEN_MALFORMED', 'on a session route')
})

t.test('TOKEN_INVALID for a bad signature, another secret, alg none or bad claims', async (t) => {
  const u = await createUser(s, { withKey: false })
  const good = signSession(JWT_SECRET, u.id).token
  const [h, p, sig] = good.split('.')
  const claims = JSON.parse(Buffer.from(p, 'base64url').toString())
  const flipped = (sig[0] === 'A' ? 'B' : 'A') + sig.slice(1)
  const cases: Array<[string, string]> = [
    ['flipped signature', `${h}.${p}.${flipped}`],
    ['truncated signature', `${h}.${p}.${sig.slice(0, 10)}`],
    ['other secret', signSession('some-other-secret', u.id).token],
    ['tampered claims', `${h}.${b64({ ...claims, sub: String(u.id + 1) })}.${sig}`],
    ['alg none, empty signature', `${b64({ alg: 'none', typ: 'JWT' })}.${p}.`],
    ['alg none, signature kept', `${b64({ alg: 'none', typ: 'JWT' })}.${p}.${sig}`],
    ['alg HS512', forge({ alg: 'HS512', typ: 'JWT' }, claims)],
    ['no alg', forge({ typ: 'JWT' }, claims)],
    ['sub not numeric', forge({ alg: 'HS256', typ: 'JWT' }, { ...claims, sub: 'admin' })],
    ['sub a number', forge({ alg: 'HS256', typ: 'JWT' }, { ...claims, sub: u.id })],
    ['no exp', forge({ alg: 'HS256', typ: 'JWT' }, { ...claims, exp: undefined })],
    ['wrong typ', forge({ alg: 'HS256', typ: 'JWT' }, { ...claims, typ: 'refresh' })],
  ]
  for (const [name, token] of cases) assertError(t, await s.req('GET', '/v1/auth/me', { jwt: token }), 401, 'TOKEN_INVALID', name)
  t.equal((await s.req('GET', '/v1/auth/me', { jwt: good })).status, 200, 'the untouched token works')
})

t.test('TOKEN_EXPIRED for a correctly signed session past its expiry', async (t) => {
  const u = await createUser(s, { withKey: false })
  const old = signSession(JWT_SECRET, u.id, Date.now() - 2 * 24 * 3600_000).token
  assertError(t, await s.req('GET', '/v1/auth/me', { jwt: old }), 401, 'TOKEN_EXPIRED')
  assertError(t, await s.req('GET', '/v1/auth/keys', { jwt: old }), 401, 'TOKEN_EXPIRED', 'on a session route')
  // A forged expired token is TOKEN_INVALID: the signature is checked before the expiry.
  const forged = signSession('not-the-secret', u.id, Date.now() - 2 * 24 * 3600_000).token
  assertError(t, await s.req('GET', '/v1/auth/me', { jwt: forged }), 401, 'TOKEN_INVALID', 'forged and expired')
})

t.test('USER_NOT_FOUND for a valid JWT naming an account that does not exist', async (t) => {
  const token = signSession(JWT_SECRET, 987654321).token
  assertError(t, await s.req('GET', '/v1/auth/me', { jwt: token }), 401, 'USER_NOT_FOUND')
  assertError(t, await s.req('GET', '/v1/auth/keys', { jwt: token }), 401, 'USER_NOT_FOUND', 'on a session route')
  assertError(t, await s.req('POST', '/v1/auth/keys', { jwt: token, body: {} }), 401, 'USER_NOT_FOUND', 'creating a key')
})

t.test('a session for an id refused as USER_NOT_FOUND works as soon as that account exists', async (t) => {
  const [{ next }] = await s.app.services.sql<any[]>`SELECT last_value + 1 AS next FROM accounts_id_seq`
  const token = signSession(JWT_SECRET, Number(next)).token
  assertError(t, await s.req('GET', '/v1/auth/me', { jwt: token }), 401, 'USER_NOT_FOUND', 'before')
  const u = await createUser(s, { withKey: false })
  t.equal(u.id, Number(next), 'the account got that id')
  const r = await s.req('GET', '/v1/auth/me', { jwt: token })
  t.equal(r.status, 200, 'no stale "no such user" answer')
  t.equal(r.body.user_id, u.id)
})

t.test('ACCOUNT_BANNED for a key (and a session) of an account the operator banned', async (t) => {
  const u = await createUser(s)
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200, 'cached as not banned')
  const p = await s.req('PATCH', `/v1/admin/accounts/${u.id}`, { admin: true, body: { banned: true } })
  t.equal(p.status, 200)
  t.equal(p.body.banned, true)
  assertError(t, await s.req('GET', '/v1/auth/me', { key: u.key }), 403, 'ACCOUNT_BANNED', 'X-API-Key')
  assertError(t, await s.req('GET', '/v1/auth/me', { headers: { authorization: `Bearer ${u.key}` } }), 403, 'ACCOUNT_BANNED', 'Bearer key')
  assertError(t, await s.req('GET', '/v1/auth/me', { jwt: u.jwt }), 403, 'ACCOUNT_BANNED', 'session on a key route')

  t.equal((await s.req('PATCH', `/v1/admin/accounts/${u.id}`, { admin: true, body: { banned: false } })).status, 200)
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200, 'unbanned: works again')
})

t.test('?api_key= is always 401, even carrying a valid key, and even with a valid header too', async (t) => {
  const u = await createUser(s)
  assertError(t, await s.req('GET', `/v1/auth/me?api_key=${u.key}`), 401, 'INVALID_API_KEY', 'query only')
  assertError(t, await s.req('GET', `/v1/auth/me?api_key=${u.key}`, { key: u.key }), 401, 'INVALID_API_KEY', 'query plus header')
  assertError(t, await s.req('GET', `/v1/auth/me?x=1&api_key=`, { jwt: u.jwt }), 401, 'INVALID_API_KEY', 'empty value plus session')
  // ?key= is the other common guess: the same helpful answer, not a generic AUTH_REQUIRED.
  for (const name of ['key', 'apikey', 'access_token']) {
    const r = await s.req('GET', `/v1/auth/me?${name}=${u.key}`)
    assertError(t, r, 401, 'INVALID_API_KEY', `?${name}=`)
    t.match(r.body.message, `API keys in the query string (?${name}=) are never accepted`)
  }
  assertError(t, await s.req('GET', `/v1/auth/keys?api_key=${u.key}`, { jwt: u.jwt }), 401, 'INVALID_API_KEY', 'session route')
  t.equal((await s.req('GET', '/v1/auth/me', { key: u.key })).status, 200, 'the key itself still works')
})

t.test('?api_key= is 401 on public routes too, the constant answers included', async (t) => {
  const u = await createUser(s)
  for (const path of ['/v1/models', '/v1/credits/pricing', '/v1/health', '/v1/openapi.json', '/v1', '/v1/docs']) {
    assertError(t, await s.req('GET', `${path}?api_key=${u.key}`), 401, 'INVALID_API_KEY', `${path}?api_key=<valid key>`)
    assertError(t, await s.req('GET', `${path}?api_key=garbage`), 401, 'INVALID_API_KEY', `${path}?api_key=garbage`)
  }
  assertError(t, await s.req('POST', `/v1/auth/login?api_key=${u.key}`, { body: { email: u.email, password: 'x' } }), 401, 'INVALID_API_KEY', 'login')
  // Any other query string is served as before (here from the full pipeline, not from memory).
  const plain = await s.req('GET', '/v1/models')
  const other = await s.req('GET', '/v1/models?lang=en')
  t.equal(other.status, 200)
  t.same(other.body, plain.body, 'the same catalogue')
})

t.test('an API key on a key-management route answers 403 insufficient_scope', async (t) => {
  const u = await createUser(s)
  const r = await s.req('GET', '/v1/auth/keys', { key: u.key })
  assertError(t, r, 403, 'insufficient_scope')
  t.type(r.body.required_scope, 'string')
  // The key is valid: the refusal counts in its window and says so, like any answer to it.
  const limit = Number(r.headers.get('x-ratelimit-limit'))
  t.ok(limit > 0, 'X-RateLimit-Limit on the 403')
  const next = await s.req('GET', '/v1/auth/keys', { key: u.key })
  t.equal(Number(next.headers.get('x-ratelimit-remaining')), Number(r.headers.get('x-ratelimit-remaining')) - 1, 'and the refused request was counted')
})

t.test('a key without a route\'s scope answers 403 insufficient_scope naming required_scope', async (t) => {
  const u = await createUser(s)
  const auth = s.app.services.auth
  const route = (scope: 'generate' | 'read'): Route => ({ method: 'GET', path: '/v1/x', auth: 'key', scope, summary: '', tag: '', handler: () => ({}) })
  const headers = { 'x-api-key': u.key }
  const both = await auth.authenticate(route('generate'), headers, new URLSearchParams())
  t.same([...both.scopes].sort(), ['generate', 'read'], 'keys get both scopes')
  t.equal(both.tier, 'free')

  await s.app.services.sql`UPDATE api_keys SET scopes = ARRAY['generate'] WHERE id = ${u.keyId}`
  auth.invalidateKey(hashKey(u.key))
  await t.resolves(auth.authenticate(route('generate'), headers, new URLSearchParams()), 'generate is still granted')
  const err = await auth.authenticate(route('read'), headers, new URLSearchParams()).catch((e: unknown) => e)
  t.ok(err instanceof ApiError)
  t.equal((err as ApiError).code, 'insufficient_scope')
  t.equal((err as ApiError).extra?.required_scope, 'read')

  const r = await s.req('GET', '/v1/jobs', { key: u.key })
  assertError(t, r, 403, 'insufficient_scope', 'GET /v1/jobs (scope read) over HTTP')
  t.equal(r.body.required_scope, 'read')
  t.ok(r.headers.get('x-ratelimit-limit') !== null && r.headers.get('x-ratelimit-remaining') !== null, 'X-RateLimit-* on the 403')
  t.equal((await s.req('GET', '/v1/jobs', { jwt: u.jwt })).status, 200, 'a dashboard session has every scope')
})
