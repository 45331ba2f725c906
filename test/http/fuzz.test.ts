// Fuzzing the credential parsers, path parameters and JSON bodies through the real server
// ("Bad input"): whatever arrives, the answer is never a 5xx, and every error is a
// docs/api.md "Errors" envelope whose code is in src/errors.ts with its own HTTP status.
import t from 'tap'
import fc from 'fast-check'
import { createHmac } from 'node:crypto'
import { ERRORS, isErrorCode } from '../../src/errors.js'
import { rawRequest } from '../fixtures/raw-http.js'
import { createUser, JWT_SECRET, startServer } from '../helpers/server.js'

const UNLIMITED = JSON.stringify(Object.fromEntries(['free', 'pro', 'enterprise', 'session'].map(k => [k, { rpm: 1_000_000 }])))
const s = await startServer(t, { TIER_LIMITS: UNLIMITED })
const port = s.app.port
const RUNS = Number(process.env.FUZZ_RUNS ?? 150)

interface Answer { status: number; body: any; text: string }

/** Why `r` breaks the contract, or null. `allowed`: the error codes this input may produce. */
function problem (r: Answer, allowed: ReadonlySet<string>, okStatuses: ReadonlySet<number> = new Set()): string | null {
  if (!Number.isInteger(r.status)) return 'no status'
  if (r.status >= 500) return `HTTP ${r.status}: ${r.text.slice(0, 300)}`
  if (r.status < 400) return okStatuses.has(r.status) ? null : `unexpected success ${r.status}: ${r.text.slice(0, 200)}`
  const b = r.body
  if (b === null || typeof b !== 'object' || b.error !== true || typeof b.message !== 'string') return `not an envelope: ${r.text.slice(0, 300)}`
  const code: string = b.code
  if (!isErrorCode(code)) return `code ${code} is not in src/errors.ts`
  if (ERRORS[code].status !== r.status) return `code ${b.code} with HTTP ${r.status}, expected ${ERRORS[code].status}`
  if (!allowed.has(b.code)) return `code ${b.code} (HTTP ${r.status}) not expected here: ${b.message}`
  return null
}

/** Runs a fast-check property whose predicate returns a problem string or null. */
async function holds<T> (t: any, name: string, arb: fc.Arbitrary<T>, run: (v: T) => Promise<string | null>, numRuns = RUNS): Promise<void> {
  const out = await fc.check(fc.asyncProperty(arb, async (v) => {
    const p = await run(v)
    if (p !== null) throw new Error(p)
  }), { numRuns })
  if (!out.failed) { t.pass(`${name} (${out.numRuns} runs)`); return }
  const err = out.errorInstance instanceof Error ? out.errorInstance.message : String(out.errorInstance)
  t.fail(`${name}: counterexample ${JSON.stringify(out.counterexample)} (seed ${out.seed}): ${err}`)
}

// Bytes legal in an HTTP field value (RFC 9110 5.5: HTAB, SP, VCHAR, obs-text). Control
// characters are refused by uWS's own parser before any route runs.
const FIELD_BYTES = [0x09, ...Array.from({ length: 0x7f - 0x20 }, (_, i) => 0x20 + i), ...Array.from({ length: 0x80 }, (_, i) => 0x80 + i)]
const fieldBytes = fc.array(fc.constantFrom(...FIELD_BYTES), { maxLength: 200 }).map(a => Buffer.from(a))
const fieldChar = fc.constantFrom(...FIELD_BYTES.map(b => String.fromCharCode(b)))
const fieldString = fc.string({ unit: fieldChar, maxLength: 200 })
const hex = fc.string({ unit: fc.constantFrom(...'0123456789abcdefABCDEF'.split('')), maxLength: 80 })
const keyLike = fc.oneof(
  hex.map(h => 'gjs_sk_' + h),
  fc.string({ unit: fieldChar, minLength: 64, maxLength: 64 }).map(x => 'gjs_sk_' + x),
  fc.string({ unit: fc.constantFrom(...'0123456789abcdef'.split('')), minLength: 64, maxLength: 64 }).map(h => 'gjs_sk_' + h),
)

const KEY_CODES = new Set(['AUTH_REQUIRED', 'INVALID_API_KEY'])
const BEARER_CODES = new Set(['AUTH_REQUIRED', 'INVALID_API_KEY', 'TOKEN_MALFORMED', 'TOKEN_INVALID', 'TOKEN_EXPIRED', 'USER_NOT_FOUND', 'PASSWORD_CHANGED'])

t.test('random bytes and strings as X-API-Key: 401 AUTH_REQUIRED or INVALID_API_KEY, never a 500', async (t) => {
  await holds(t, 'random bytes', fc.oneof(fieldBytes, keyLike.map(k => Buffer.from(k, 'latin1'))), async (v) =>
    problem(await rawRequest(port, 'GET', '/v1/auth/me', [['X-API-Key', v]]), KEY_CODES))
  await holds(t, 'random strings via fetch', fc.oneof(fc.string({ maxLength: 120 }), keyLike), async (v) =>
    problem(await s.req('GET', '/v1/auth/me', { headers: { 'x-api-key': v } }), KEY_CODES))
})

t.test('random Bearer tokens and Authorization headers: a credential code, never a 500', async (t) => {
  await holds(t, 'Bearer <random bytes>', fc.oneof(fieldBytes, keyLike.map(k => Buffer.from(k, 'latin1'))), async (v) =>
    problem(await rawRequest(port, 'GET', '/v1/auth/me', [['Authorization', Buffer.concat([Buffer.from('Bearer '), v])]]), BEARER_CODES))
  await holds(t, 'random Authorization value', fieldString, async (v) =>
    problem(await rawRequest(port, 'GET', '/v1/auth/me', [['Authorization', v]]), BEARER_CODES))
  await holds(t, 'Bearer on a session route', fc.oneof(fc.string({ maxLength: 120 }), keyLike), async (v) =>
    problem(await rawRequest(port, 'GET', '/v1/auth/keys', [['Authorization', `Bearer ${v}`]]), new Set([...BEARER_CODES, 'insufficient_scope'])))
})

const b64 = (x: Uint8Array | string) => Buffer.from(x).toString('base64url')
const claimsArb = fc.record({
  sub: fc.oneof(fc.string({ maxLength: 20 }), fc.nat().map(String), fc.integer(), fc.constant('1')),
  iat: fc.oneof(fc.integer(), fc.string({ maxLength: 5 })),
  exp: fc.oneof(fc.integer({ min: 0, max: 4_000_000_000 }), fc.double(), fc.string({ maxLength: 5 })),
  iat_ms: fc.oneof(fc.integer(), fc.double()),
  typ: fc.oneof(fc.constant('session'), fc.string({ maxLength: 10 })),
}, { requiredKeys: [] })
const headerArb = fc.oneof(
  fc.constant({ alg: 'HS256', typ: 'JWT' }),
  fc.record({ alg: fc.oneof(fc.constantFrom('HS256', 'none', 'RS256', 'HS512', ''), fc.string({ maxLength: 8 })), typ: fc.string({ maxLength: 5 }) }, { requiredKeys: [] }),
  fc.jsonValue({ maxDepth: 2 }),
)
const partArb = fc.oneof(
  fc.uint8Array({ maxLength: 64 }).map(b64),
  fc.jsonValue({ maxDepth: 2 }).map(v => b64(JSON.stringify(v) ?? '')),
  fc.string({ maxLength: 40 }),
  fc.base64String({ maxLength: 40 }),
  fc.constant(''),
)
const jwtLike = fc.oneof(
  fc.tuple(partArb, partArb, partArb).map(p => p.join('.')),
  fc.array(partArb, { maxLength: 6 }).map(p => p.join('.')),
  // Structurally perfect, signed with the real secret: only the claims can be wrong.
  fc.tuple(headerArb, claimsArb).map(([h, c]) => {
    const body = `${b64(JSON.stringify(h) ?? 'null')}.${b64(JSON.stringify(c))}`
    return `${body}.${createHmac('sha256', JWT_SECRET).update(body).digest('base64url')}`
  }),
  // Signed with some other secret.
  fc.tuple(claimsArb, fc.string({ minLength: 1, maxLength: 20 })).map(([c, secret]) => {
    const body = `${b64(JSON.stringify({ alg: 'HS256', typ: 'JWT' }))}.${b64(JSON.stringify(c))}`
    return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`
  }),
)

t.test('JWT-like a.b.c tokens built from random base64url parts: a token code, never a 500', async (t) => {
  const codes = new Set(['TOKEN_MALFORMED', 'TOKEN_INVALID', 'TOKEN_EXPIRED', 'USER_NOT_FOUND', 'PASSWORD_CHANGED', 'AUTH_REQUIRED', 'INVALID_API_KEY'])
  await holds(t, 'key route', jwtLike, async (v) =>
    problem(await rawRequest(port, 'GET', '/v1/auth/me', [['Authorization', `Bearer ${v}`]]), codes, new Set([200])), RUNS * 2)
  await holds(t, 'session route', jwtLike, async (v) =>
    problem(await rawRequest(port, 'GET', '/v1/auth/keys', [['Authorization', `Bearer ${v}`]]), codes, new Set([200])))
})

t.test('random keyId path parameters: INVALID_PARAM or KEY_NOT_FOUND, never a 500 (nor a crash)', async (t) => {
  const u = await createUser(s, { withKey: false })
  const other = await createUser(s)
  const codes = new Set(['INVALID_PARAM', 'KEY_NOT_FOUND', 'NOT_FOUND'])
  const idArb = fc.oneof(
    fc.string({ unit: 'binary', maxLength: 30 }),
    fc.integer().map(String),
    fc.double().map(String),
    fc.bigInt().map(String),
    fc.constant(String(other.keyId)),
  )
  await holds(t, 'encoded, POST rotate', idArb, async (v) =>
    problem(await s.req('POST', `/v1/auth/keys/${encodeURIComponent(v)}/rotate`, { jwt: u.jwt }), codes))
  await holds(t, 'encoded, DELETE', idArb, async (v) =>
    problem(await s.req('DELETE', `/v1/auth/keys/${encodeURIComponent(v)}`, { jwt: u.jwt }), codes))
  // Raw request targets: malformed percent-escapes (`%`, `%zz`, `%E0%A4%A`) must not reach decodeURIComponent unguarded.
  const rawChar = fc.constantFrom(...'0123456789abcdefXYZ-._~!$&\'()*+,;=:@%'.split(''))
  const rawId = fc.oneof(
    fc.string({ unit: rawChar, minLength: 1, maxLength: 20 }),
    fc.constantFrom('%', '%%', '%zz', '%E0%A4%A', '%C0%AF', '1%', '%31', '%FF%FE'),
  )
  await holds(t, 'raw, POST rotate', rawId, async (v) =>
    problem(await rawRequest(port, 'POST', `/v1/auth/keys/${v}/rotate`, [['Authorization', `Bearer ${u.jwt}`]]), codes))
  await holds(t, 'raw, DELETE', rawId, async (v) =>
    problem(await rawRequest(port, 'DELETE', `/v1/auth/keys/${v}`, [['Authorization', `Bearer ${u.jwt}`]]), codes))
  await holds(t, 'raw, operator id', rawId, async (v) =>
    problem(await rawRequest(port, 'GET', `/v1/admin/accounts/${v}`, [['Authorization', 'Bearer test-admin-token-0123456789abcdef']]), new Set(['INVALID_PARAM', 'NOT_FOUND']), new Set([200])))
  t.equal((await s.req('GET', '/v1/auth/me', { key: other.key })).status, 200, 'the other account\'s key was never rotated or revoked')
  t.equal((await s.req('GET', '/v1/health')).status, 200, 'the server is still up')
})

const anyString = fc.oneof(fc.string({ maxLength: 40 }), fc.string({ unit: 'binary', maxLength: 40 }), fc.emailAddress())
const jsonAny = fc.jsonValue({ maxDepth: 3, stringUnit: 'binary' })

t.test('random JSON bodies for signup, login, password change and key creation: never a 500', async (t) => {
  const u = await createUser(s, { withKey: false })
  const signupBody = fc.oneof(jsonAny, fc.record({ email: fc.oneof(anyString, jsonAny), password: fc.oneof(anyString, jsonAny) }, { requiredKeys: [] }))
  await holds(t, 'signup', signupBody, async (v) =>
    problem(await s.req('POST', '/v1/auth/signup', { body: v }), new Set(['VALIDATION_ERROR', 'CONFLICT']), new Set([201])), 60)
  const loginBody = fc.oneof(jsonAny, fc.record({
    email: fc.oneof(anyString, fc.constant(u.email), jsonAny), password: fc.oneof(anyString, jsonAny)
  }, { requiredKeys: [] }))
  await holds(t, 'login', loginBody, async (v) =>
    problem(await s.req('POST', '/v1/auth/login', { body: v }), new Set(['VALIDATION_ERROR', 'INVALID_CREDENTIALS'])), 60)
  const pwBody = fc.oneof(jsonAny, fc.record({
    current_password: fc.oneof(anyString, jsonAny), new_password: fc.oneof(anyString, jsonAny)
  }, { requiredKeys: [] }))
  await holds(t, 'password change', pwBody, async (v) =>
    problem(await s.req('POST', '/v1/auth/password', { jwt: u.jwt, body: v }), new Set(['VALIDATION_ERROR', 'INVALID_CREDENTIALS'])), 40)
  const keyBody = fc.oneof(jsonAny, fc.record({
    name: fc.oneof(anyString, jsonAny),
    expires_in_days: fc.oneof(fc.integer(), fc.double(), fc.integer({ min: 1, max: 3650 }), jsonAny),
  }, { requiredKeys: [] }))
  await holds(t, 'key creation', keyBody, async (v) =>
    problem(await s.req('POST', '/v1/auth/keys', { jwt: u.jwt, body: v }), new Set(['VALIDATION_ERROR', 'KEY_LIMIT_REACHED']), new Set([201])))
  t.equal((await s.req('GET', '/v1/auth/me', { jwt: u.jwt })).status, 200, 'the session survived (the password never changed)')
})

t.test('random bytes as a JSON body: 400 VALIDATION_ERROR at worst, never a 500', async (t) => {
  const u = await createUser(s, { withKey: false })
  const bytes = fc.oneof(fc.uint8Array({ maxLength: 300 }).map(b => Buffer.from(b)), fc.string({ unit: 'binary', maxLength: 100 }).map(x => Buffer.from(x)))
  const codes = new Set(['VALIDATION_ERROR', 'INVALID_CREDENTIALS', 'CONFLICT', 'KEY_LIMIT_REACHED'])
  for (const [path, jwt] of [['/v1/auth/login', undefined], ['/v1/auth/signup', undefined], ['/v1/auth/keys', u.jwt]] as const) {
    await holds(t, path, bytes, async (v) =>
      problem(await s.req('POST', path, { raw: v, jwt, headers: { 'content-type': 'application/json' } }), codes, new Set([200, 201])), 60)
  }
})

t.test('strings PostgreSQL cannot store (NUL) are refused as 400, not a database error', async (t) => {
  const u = await createUser(s, { withKey: false })
  const login = await s.req('POST', '/v1/auth/login', { body: { email: 'a\u0000b@example.com', password: 'x' } })
  t.equal(login.status, 400)
  t.equal(login.body.code, 'VALIDATION_ERROR')
  const key = await s.req('POST', '/v1/auth/keys', { jwt: u.jwt, body: { name: 'nul\u0000name' } })
  t.equal(key.status, 400)
  t.equal(key.body.code, 'VALIDATION_ERROR')
  const admin = await s.req('POST', `/v1/admin/accounts/${u.id}/assets`, { admin: true, body: { kind: 'voice', name: '\u0000' } })
  t.equal(admin.status, 400)
  t.equal(admin.body.code, 'VALIDATION_ERROR')
  const ok = await s.req('POST', '/v1/auth/keys', { jwt: u.jwt, body: { name: 'a literal \\u0000 is fine' } })
  t.equal(ok.status, 201, 'an escaped backslash-u is just text')
  t.equal(ok.body.name, 'a literal \\u0000 is fine')
})
