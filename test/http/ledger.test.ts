// GET /v1/credits/ledger: the caller's credit entries in the list envelope of
// docs/api.md "Endpoints", newest first, each with the job it belongs to; filters kind and job_id; only
// the caller's own entries; bad input is a 400 in the error envelope.
import t from 'tap'
import { createUser, startServer } from '../helpers/server.js'
import { FAST_ENV, pollJob } from '../helpers/jobs.js'

const s = await startServer(t, FAST_ENV)

t.test('charges, refunds, purchases and grants with their jobs, newest first', async t => {
  const u = await createUser(s, { credits: 200 })
  const other = await createUser(s, { credits: 500 })
  const ok = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a red apple' } })
  t.equal(ok.status, 201)
  const failed = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana-pro', prompt: 'a green apple [sim:fail]' } })
  t.equal(failed.status, 201)
  await pollJob(s, u, ok.body.id)
  const f = await pollJob(s, u, failed.body.id)
  t.equal(f.job.status, 'failed')
  t.equal((await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 1000 } })).status, 201)

  const r = await s.req('GET', '/v1/credits/ledger', { key: u.key })
  t.equal(r.status, 200)
  t.equal(r.headers.get('cache-control'), 'no-store')
  t.same(Object.keys(r.body).sort(), ['data', 'has_more', 'limit', 'offset', 'total'])
  t.equal(r.body.total, 5)
  t.equal(r.body.limit, 20)
  t.equal(r.body.has_more, false)
  const rows = r.body.data.map((e: any) => [e.kind, e.delta, e.job_id])
  // The refund and the purchase race only with each other's commit order: compare as sets.
  t.same(rows.slice(2).concat(rows.slice(0, 2)).sort(), [
    ['charge', -10, ok.body.id], ['charge', -30, failed.body.id], ['grant', 200, null], ['purchase', 1000, null], ['refund', 30, failed.body.id],
  ].sort())
  t.same(rows[rows.length - 1], ['grant', 200, null], 'oldest last')
  const ids = r.body.data.map((e: any) => e.id)
  t.same(ids, [...ids].sort((a: number, b: number) => b - a), 'newest first')
  for (const e of r.body.data) t.ok(new Date(e.created_at).toISOString() === e.created_at, 'created_at is ISO')
  t.equal(r.body.data.reduce((n: number, e: any) => n + e.delta, 0), (await s.req('GET', '/v1/credits', { key: u.key })).body.credits, 'entries sum to the balance')

  const charges = await s.req('GET', '/v1/credits/ledger?kind=charge', { jwt: u.jwt })
  t.equal(charges.status, 200, 'a dashboard session reads it too')
  t.same(charges.body.data.map((e: any) => e.kind), ['charge', 'charge'])
  const ofJob = await s.req('GET', `/v1/credits/ledger?job_id=${failed.body.id}`, { key: u.key })
  t.same(ofJob.body.data.map((e: any) => [e.kind, e.delta]).sort(), [['charge', -30], ['refund', 30]])
  const paged = await s.req('GET', '/v1/credits/ledger?limit=2&offset=2', { key: u.key })
  t.equal(paged.body.data.length, 2)
  t.equal(paged.body.has_more, true)
  t.same(paged.body.data.map((e: any) => e.id), ids.slice(2, 4))

  const theirs = await s.req('GET', '/v1/credits/ledger', { key: other.key })
  t.same(theirs.body.data.map((e: any) => [e.kind, e.delta]), [['grant', 500]], 'another account sees only its own')
  const foreignJob = await s.req('GET', `/v1/credits/ledger?job_id=${ok.body.id}`, { key: other.key })
  t.equal(foreignJob.body.total, 0)
})

t.test('bad input and missing credentials answer in the error envelope', async t => {
  const u = await createUser(s)
  for (const q of ['kind=bogus', 'limit=0', 'limit=101', 'offset=-1', 'limit=abc']) {
    const r = await s.req('GET', `/v1/credits/ledger?${q}`, { key: u.key })
    t.equal(r.status, 400, q)
    t.equal(r.body.code, 'VALIDATION_ERROR', q)
  }
  const none = await s.req('GET', '/v1/credits/ledger')
  t.equal(none.status, 401)
  t.equal(none.body.code, 'AUTH_REQUIRED')
})
