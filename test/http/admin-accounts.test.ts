// GET /v1/admin/accounts (the dashboard's operator view): accounts newest first in
// the list envelope, `q` matching part of the email (wildcards taken literally), ADMIN_TOKEN only.
import t from 'tap'
import { createUser, startServer } from '../helpers/server.js'

const s = await startServer(t)

t.test('lists accounts newest first with flags and balances; q filters by email', async t => {
  const a = await createUser(s, { credits: 300 })
  const b = await createUser(s, { credits: 50, verified: false })
  const tag = `under_score${process.pid}`
  const c = await s.req('POST', '/v1/admin/accounts', { admin: true, body: { email: `${tag}@example.com`, password: 'a long password', credits: 7 } })
  t.equal(c.status, 201)
  t.equal((await s.req('PATCH', `/v1/admin/accounts/${a.id}`, { admin: true, body: { banned: true } })).status, 200)

  const r = await s.req('GET', '/v1/admin/accounts', { admin: true })
  t.equal(r.status, 200)
  t.equal(r.body.total, 3)
  t.same(r.body.data.map((x: any) => x.user_id), [c.body.user_id, b.id, a.id], 'newest first')
  const byId = new Map(r.body.data.map((x: any) => [x.user_id, x]))
  t.match(byId.get(a.id), { email: a.email, credits: 300, banned: true, email_verified: true, tier: 'free', has_purchased: false })
  t.match(byId.get(b.id), { credits: 50, banned: false, email_verified: false })

  const q = await s.req('GET', `/v1/admin/accounts?q=${encodeURIComponent(tag.toUpperCase())}`, { admin: true })
  t.same(q.body.data.map((x: any) => x.user_id), [c.body.user_id], 'case-insensitive substring')
  const literal = await s.req('GET', `/v1/admin/accounts?q=${encodeURIComponent('under%score')}`, { admin: true })
  t.equal(literal.body.total, 0, '% is not a wildcard')
  const underscore = await s.req('GET', `/v1/admin/accounts?q=${encodeURIComponent('r_s')}`, { admin: true })
  t.equal(underscore.body.total, 1, '_ matches only itself')
  const paged = await s.req('GET', '/v1/admin/accounts?limit=1&offset=1', { admin: true })
  t.same(paged.body.data.map((x: any) => x.user_id), [b.id])
  t.equal(paged.body.has_more, true)
})

t.test('needs ADMIN_TOKEN; bad paging is a 400', async t => {
  const u = await createUser(s)
  t.equal((await s.req('GET', '/v1/admin/accounts')).body.code, 'AUTH_REQUIRED')
  t.equal((await s.req('GET', '/v1/admin/accounts', { jwt: u.jwt })).status, 401)
  t.equal((await s.req('GET', '/v1/admin/accounts', { headers: { authorization: 'Bearer wrong' } })).body.code, 'TOKEN_INVALID')
  const bad = await s.req('GET', '/v1/admin/accounts?limit=1000', { admin: true })
  t.equal(bad.status, 400)
  t.equal(bad.body.code, 'VALIDATION_ERROR')
})
