// Operator API (docs/api.md "Endpoints"): Authorization: Bearer <ADMIN_TOKEN>.
import t from 'tap'
import { assertError } from '../helpers/assert.js'
import { ADMIN_TOKEN, createUser, startServer } from '../helpers/server.js'

const s = await startServer(t)
const sql = s.app.services.sql

let seq = 0
const email = (tag: string) => `admin_${tag}_${process.pid}_${++seq}@example.com`

async function newAccount (body: Record<string, unknown> = {}) {
  const r = await s.req('POST', '/v1/admin/accounts', { admin: true, body: { email: email('acct'), password: 'operator made pw', ...body } })
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
  return r.body.user_id as number
}

/** Ledger invariant (docs/architecture.md "Durability"): no account whose snapshot differs from its entries. */
async function ledgerMismatches (): Promise<any[]> {
  return sql<any[]>`
    SELECT a.id, a.credits, coalesce(sum(e.delta), 0)::bigint AS sum
    FROM accounts a LEFT JOIN credit_entries e ON e.account_id = a.id
    GROUP BY a.id HAVING a.credits <> coalesce(sum(e.delta), 0)`
}

t.test('a missing or wrong operator token answers 401 on every operator route', async (t) => {
  const id = await newAccount()
  const routes: Array<[string, string, unknown]> = [
    ['POST', '/v1/admin/accounts', { email: email('x'), password: 'whatever pw' }],
    ['GET', `/v1/admin/accounts/${id}`, undefined],
    ['POST', `/v1/admin/accounts/${id}/purchases`, { credits: 10 }],
    ['POST', `/v1/admin/accounts/${id}/grants`, { credits: 10 }],
    ['PATCH', `/v1/admin/accounts/${id}`, { banned: true }],
    ['POST', `/v1/admin/accounts/${id}/assets`, { kind: 'voice', name: 'v' }],
  ]
  const u = await createUser(s)
  for (const [method, path, body] of routes) {
    assertError(t, await s.req(method, path, { body }), 401, 'AUTH_REQUIRED', `${method} ${path} without a token`)
    assertError(t, await s.req(method, path, { body, headers: { authorization: `Bearer ${ADMIN_TOKEN}x` } }), 401, 'TOKEN_INVALID', `${method} ${path} wrong token`)
    assertError(t, await s.req(method, path, { body, headers: { authorization: 'Bearer short' } }), 401, 'TOKEN_INVALID', `${method} ${path} short token`)
    assertError(t, await s.req(method, path, { body, jwt: u.jwt }), 401, 'TOKEN_INVALID', `${method} ${path} user session`)
    assertError(t, await s.req(method, path, { body, key: u.key }), 401, 'AUTH_REQUIRED', `${method} ${path} API key`)
  }
  const [a] = await sql<any[]>`SELECT banned, credits FROM accounts WHERE id = ${id}`
  t.equal(a.banned, false, 'nothing changed')
  t.equal(a.credits, 200)
})

t.test('create account: 201 {user_id, email, credits}, credits default 200 as a grant, verified flag', async (t) => {
  const e = email('create')
  const r = await s.req('POST', '/v1/admin/accounts', { admin: true, body: { email: e, password: 'operator made pw' } })
  t.equal(r.status, 201)
  t.same(Object.keys(r.body).sort(), ['credits', 'email', 'user_id'])
  t.equal(r.body.email, e)
  t.equal(r.body.credits, 200)
  const [a] = await sql<any[]>`SELECT email_verified, credits FROM accounts WHERE id = ${r.body.user_id}`
  t.equal(a.email_verified, false, 'unverified unless asked')
  const entries = await sql<any[]>`SELECT delta, kind FROM credit_entries WHERE account_id = ${r.body.user_id}`
  t.same(entries.map(x => [Number(x.delta), x.kind]), [[200, 'grant']])

  const v = await s.req('POST', '/v1/admin/accounts', { admin: true, body: { email: email('v'), password: 'operator made pw', verified: true, credits: 1234 } })
  t.equal(v.status, 201)
  t.equal(v.body.credits, 1234)
  const [b] = await sql<any[]>`SELECT email_verified FROM accounts WHERE id = ${v.body.user_id}`
  t.equal(b.email_verified, true)

  const z = await s.req('POST', '/v1/admin/accounts', { admin: true, body: { email: email('z'), password: 'operator made pw', credits: 0 } })
  t.equal(z.body.credits, 0)
  t.equal((await sql<any[]>`SELECT count(*)::int AS n FROM credit_entries WHERE account_id = ${z.body.user_id}`)[0].n, 0, 'no zero entry')

  const login = await s.req('POST', '/v1/auth/login', { body: { email: e, password: 'operator made pw' } })
  t.equal(login.status, 200, 'the password works for login')

  assertError(t, await s.req('POST', '/v1/admin/accounts', { admin: true, body: { email: e, password: 'operator made pw' } }), 409, 'CONFLICT', 'duplicate email')
  for (const [name, body] of [
    ['no email', { password: 'operator made pw' }],
    ['negative credits', { email: email('n'), password: 'operator made pw', credits: -1 }],
    ['fractional credits', { email: email('n'), password: 'operator made pw', credits: 1.5 }],
    ['verified not boolean', { email: email('n'), password: 'operator made pw', verified: 'yes' }],
  ] as const) assertError(t, await s.req('POST', '/v1/admin/accounts', { admin: true, body }), 400, 'VALIDATION_ERROR', name)
})

t.test('GET account: balance, flags, tier, active keys and ledger totals', async (t) => {
  const u = await createUser(s, { credits: 300 })
  const r = await s.req('GET', `/v1/admin/accounts/${u.id}`, { admin: true })
  t.equal(r.status, 200)
  t.same(r.body, {
    user_id: u.id,
    email: u.email,
    credits: 300,
    tier: 'free',
    has_purchased: false,
    enterprise: false,
    banned: false,
    email_verified: true,
    credits_locked: false,
    active_keys: 1,
    ledger: { entries: 1, sum: 300, by_kind: { grant: 300 } },
  })
})

t.test('purchase adds credits, marks has_purchased, writes a purchase entry and a purchases row', async (t) => {
  const id = await newAccount()
  const r = await s.req('POST', `/v1/admin/accounts/${id}/purchases`, { admin: true, body: { credits: 600, currency: 'usd', amount: 5 } })
  t.equal(r.status, 201)
  t.equal(r.body.credits, 800)
  t.equal(r.body.has_purchased, true)
  t.equal(r.body.tier, 'pro')
  t.same(r.body.ledger, { entries: 2, sum: 800, by_kind: { grant: 200, purchase: 600 } })
  const [p] = await sql<any[]>`SELECT credits, currency, amount FROM purchases WHERE account_id = ${id}`
  t.equal(Number(p.credits), 600)
  t.equal(p.currency, 'USD', 'currency upper-cased')
  t.equal(Number(p.amount), 5)

  const r2 = await s.req('POST', `/v1/admin/accounts/${id}/purchases`, { admin: true, body: { credits: 3000 } })
  t.equal(r2.status, 201, 'currency and amount are optional')
  t.equal(r2.body.credits, 3800)

  for (const [name, body] of [
    ['zero credits', { credits: 0 }],
    ['no credits', {}],
    ['credits as string', { credits: '10' }],
    ['4-letter currency', { credits: 10, currency: 'USDT' }],
    ['negative amount', { credits: 10, amount: -1 }],
  ] as const) assertError(t, await s.req('POST', `/v1/admin/accounts/${id}/purchases`, { admin: true, body }), 400, 'VALIDATION_ERROR', name)
  t.equal((await s.req('GET', `/v1/admin/accounts/${id}`, { admin: true })).body.credits, 3800, 'failures changed nothing')
})

t.test('grant adds credits as a grant entry and leaves the tier alone', async (t) => {
  const id = await newAccount()
  const r = await s.req('POST', `/v1/admin/accounts/${id}/grants`, { admin: true, body: { credits: 50, note: 'support goodwill' } })
  t.equal(r.status, 201)
  t.equal(r.body.credits, 250)
  t.equal(r.body.has_purchased, false)
  t.equal(r.body.tier, 'free')
  t.same(r.body.ledger, { entries: 2, sum: 250, by_kind: { grant: 250 } })
  const [e] = await sql<any[]>`SELECT note FROM credit_entries WHERE account_id = ${id} ORDER BY id DESC LIMIT 1`
  t.equal(e.note, 'support goodwill')
  assertError(t, await s.req('POST', `/v1/admin/accounts/${id}/grants`, { admin: true, body: { credits: -5 } }), 400, 'VALIDATION_ERROR', 'negative grant')
})

t.test('PATCH sets flags (banned, email_verified, credits_locked, enterprise) and answers the account', async (t) => {
  const id = await newAccount()
  let r = await s.req('PATCH', `/v1/admin/accounts/${id}`, { admin: true, body: { banned: true, email_verified: true, credits_locked: true, enterprise: true } })
  t.equal(r.status, 200)
  t.equal(r.body.banned, true)
  t.equal(r.body.email_verified, true)
  t.equal(r.body.credits_locked, true)
  t.equal(r.body.enterprise, true)
  t.equal(r.body.tier, 'enterprise')
  r = await s.req('PATCH', `/v1/admin/accounts/${id}`, { admin: true, body: { banned: false } })
  t.equal(r.body.banned, false, 'one flag at a time')
  t.equal(r.body.credits_locked, true, 'others unchanged')
  r = await s.req('PATCH', `/v1/admin/accounts/${id}`, { admin: true, body: {} })
  t.equal(r.status, 200, 'empty patch is a no-op')
  const [a] = await sql<any[]>`SELECT banned, email_verified, credits_locked, enterprise FROM accounts WHERE id = ${id}`
  t.same({ ...a }, { banned: false, email_verified: true, credits_locked: true, enterprise: true })

  for (const [name, body] of [
    ['flag not boolean', { banned: 'true' }],
    ['unknown field', { verified: true }],
    ['a column that is not a flag', { has_purchased: true }],
    ['a text column', { email: true }],
    ['a numeric column', { credits: true }],
  ] as const) assertError(t, await s.req('PATCH', `/v1/admin/accounts/${id}`, { admin: true, body }), 400, 'VALIDATION_ERROR', name)
  const [b] = await sql<any[]>`SELECT has_purchased, credits FROM accounts WHERE id = ${id}`
  t.equal(b.has_purchased, false, 'has_purchased cannot be patched')
  t.equal(b.credits, 200)
})

t.test('assets: 201 {id, kind, name, created_at} for character and voice', async (t) => {
  const id = await newAccount()
  const c = await s.req('POST', `/v1/admin/accounts/${id}/assets`, { admin: true, body: { kind: 'character', name: 'Ada' } })
  t.equal(c.status, 201)
  t.type(c.body.id, 'number')
  t.equal(c.body.kind, 'character')
  t.equal(c.body.name, 'Ada')
  t.ok(!Number.isNaN(Date.parse(c.body.created_at)))
  const v = await s.req('POST', `/v1/admin/accounts/${id}/assets`, { admin: true, body: { kind: 'voice', name: 'Narrator' } })
  t.equal(v.status, 201)
  t.equal(v.body.kind, 'voice')
  const rows = await sql<any[]>`SELECT kind, name FROM assets WHERE account_id = ${id} ORDER BY id`
  t.same(rows.map(r => [r.kind, r.name]), [['character', 'Ada'], ['voice', 'Narrator']])
  assertError(t, await s.req('POST', `/v1/admin/accounts/${id}/assets`, { admin: true, body: { kind: 'prop', name: 'x' } }), 400, 'VALIDATION_ERROR', 'bad kind')
  assertError(t, await s.req('POST', `/v1/admin/accounts/${id}/assets`, { admin: true, body: { kind: 'voice', name: '' } }), 400, 'VALIDATION_ERROR', 'empty name')
})

t.test('unknown account ids answer 404 NOT_FOUND; non-integer ids 400 INVALID_PARAM', async (t) => {
  const calls: Array<[string, string, unknown]> = [
    ['GET', '', undefined],
    ['POST', '/purchases', { credits: 10 }],
    ['POST', '/grants', { credits: 10 }],
    ['PATCH', '', { banned: true }],
    ['POST', '/assets', { kind: 'voice', name: 'v' }],
  ]
  for (const [method, suffix, body] of calls) {
    assertError(t, await s.req(method, `/v1/admin/accounts/987654321${suffix}`, { admin: true, body }), 404, 'NOT_FOUND', `${method} unknown${suffix}`)
    for (const bad of ['abc', '1.5', '-3', '0']) {
      const r = await s.req(method, `/v1/admin/accounts/${bad}${suffix}`, { admin: true, body })
      assertError(t, r, 400, 'INVALID_PARAM', `${method} ${bad}${suffix}`)
      t.equal(r.body.param, 'id')
    }
  }
  t.same(await ledgerMismatches(), [])
})

t.test('ledger invariant credits = sum(entries) holds after 100 concurrent grants and purchases on 5 accounts', async (t) => {
  const ids = await Promise.all(Array.from({ length: 5 }, () => newAccount({ credits: 100 })))
  const expected = new Map(ids.map(id => [id, 100]))
  const calls = Array.from({ length: 100 }, (_, i) => {
    const id = ids[i % 5]
    const credits = 1 + (i % 7)
    expected.set(id, expected.get(id)! + credits)
    const kind = i % 3 === 0 ? 'purchases' : 'grants'
    return s.req('POST', `/v1/admin/accounts/${id}/${kind}`, { admin: true, body: { credits } })
  })
  const rs = await Promise.all(calls)
  t.same(rs.filter(r => r.status !== 201).map(r => r.text), [], 'all 201')
  t.same(await ledgerMismatches(), [], 'no account breaks the invariant')
  for (const id of ids) {
    const r = await s.req('GET', `/v1/admin/accounts/${id}`, { admin: true })
    t.equal(r.body.credits, expected.get(id), `account ${id} balance`)
    t.equal(r.body.ledger.sum, expected.get(id), `account ${id} ledger sum`)
    t.equal(r.body.ledger.entries, 21, '1 opening grant + 20 entries')
    const [a] = await sql<any[]>`SELECT credits FROM accounts WHERE id = ${id}`
    t.equal(a.credits, expected.get(id), 'snapshot in PostgreSQL')
  }
})
