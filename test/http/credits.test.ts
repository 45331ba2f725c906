// GET /v1/credits, docs/api.md "Usage and limits" and "Jobs" (free trial).
import t from 'tap'
import { assertError } from '../helpers/assert.js'
import { createUser, startServer } from '../helpers/server.js'
import { FAST_ENV, image, pollJob, video } from '../helpers/jobs.js'

const s = await startServer(t, FAST_ENV)

t.test('a new account: {credits, tier free, has_purchased false, free_trial {credits_granted 200, video_used false}}', async (t) => {
  const u = await createUser(s)
  const r = await s.req('GET', '/v1/credits', { key: u.key })
  t.equal(r.status, 200)
  t.same(r.body, { credits: 200, tier: 'free', has_purchased: false, free_trial: { credits_granted: 200, video_used: false } })
})

t.test('the balance follows charges, refunds and purchases; the tier and trial flags follow the account', async (t) => {
  const u = await createUser(s, { credits: 200 })
  const v = await s.req('POST', '/v1/generate/video', { key: u.key, body: video() })
  t.equal(v.status, 201)
  let r = await s.req('GET', '/v1/credits', { key: u.key })
  t.same(r.body, { credits: 80, tier: 'free', has_purchased: false, free_trial: { credits_granted: 200, video_used: true } }, 'after the trial video')

  const f = await s.req('POST', '/v1/generate/image', { key: u.key, body: image('[sim:fail]') })
  // The 201 carries the committed balance; a GET now could already see the refund (75 ms job).
  t.equal(f.body.remaining_credits, 70, 'charged up front')
  await pollJob(s, u, f.body.id)
  t.equal((await s.req('GET', '/v1/credits', { key: u.key })).body.credits, 80, 'refunded on failure')

  const p = await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 3000, currency: 'usd', amount: 19 } })
  t.equal(p.status, 201)
  r = await s.req('GET', '/v1/credits', { key: u.key })
  t.same(r.body, { credits: 3080, tier: 'pro', has_purchased: true, free_trial: { credits_granted: 200, video_used: true } }, 'a purchase upgrades to pro; purchases are not grants')

  const e = await s.req('PATCH', `/v1/admin/accounts/${u.id}`, { admin: true, body: { enterprise: true } })
  t.equal(e.status, 200)
  r = await s.req('GET', '/v1/credits', { key: u.key })
  t.equal(r.body.tier, 'enterprise')
})

t.test('GET /v1/credits needs a credential; a session JWT works too', async (t) => {
  assertError(t, await s.req('GET', '/v1/credits'), 401, 'AUTH_REQUIRED')
  const u = await createUser(s, { credits: 321 })
  const r = await s.req('GET', '/v1/credits', { jwt: u.jwt })
  t.equal(r.status, 200)
  t.equal(r.body.credits, 321)
})

t.test('the balance matches the ledger total for the account (operator view)', async (t) => {
  const u = await createUser(s, { credits: 200 })
  await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  await s.req('POST', `/v1/admin/accounts/${u.id}/grants`, { admin: true, body: { credits: 25 } })
  const mine = await s.req('GET', '/v1/credits', { key: u.key })
  const admin = await s.req('GET', `/v1/admin/accounts/${u.id}`, { admin: true })
  t.equal(mine.body.credits, 215)
  t.equal(admin.body.credits, 215)
})
