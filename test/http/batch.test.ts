// POST /v1/batch, docs/api.md "Batch (paid plans)" (per-item result shape: docs/api.md "Endpoints").
import t from 'tap'
import { assertError } from '../helpers/assert.js'
import { createUser, startServer, type TestUser } from '../helpers/server.js'
import { balance, dbOf, FAST_ENV, image, ledger, paidUser, pollJob, video } from '../helpers/jobs.js'
import { waitFor } from '../helpers/wait.js'

const s = await startServer(t, FAST_ENV)
const sql = dbOf(t, s)
const batch = (u: TestUser, jobs: unknown) => s.req('POST', '/v1/batch', { key: u.key, body: { jobs } })
const img = (prompt = 'an apple', extra: Record<string, unknown> = {}) => ({ type: 'image', ...image(prompt, extra) })
const vid = (prompt = 'a wave', extra: Record<string, unknown> = {}) => ({ type: 'video', ...video(prompt, extra) })

async function jobCount (u: TestUser): Promise<number> {
  const [r] = await sql`SELECT count(*)::int AS n FROM jobs WHERE account_id = ${u.id}`
  return r.n
}

t.test('a free key gets 403 upgrade_required with pricing_url and nothing is charged', async (t) => {
  const u = await createUser(s, { credits: 200 })
  const r = await batch(u, [img()])
  assertError(t, r, 403, 'upgrade_required')
  t.type(r.body.pricing_url, 'string')
  t.equal(await balance(s, u), 200)
  t.equal(await jobCount(u), 0)
  const p = await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 100 } })
  t.equal(p.status, 201)
  const after = await batch(u, [img()])
  t.equal(after.status, 200, 'the same key works once the account has purchased')
})

t.test('1 to 10 items: 0 or 11 items, or no jobs array, is 400 VALIDATION_ERROR', async (t) => {
  const u = await paidUser(s, 1000)
  assertError(t, await batch(u, []), 400, 'VALIDATION_ERROR', '0 items')
  assertError(t, await batch(u, Array.from({ length: 11 }, () => img())), 400, 'VALIDATION_ERROR', '11 items')
  assertError(t, await s.req('POST', '/v1/batch', { key: u.key, body: {} }), 400, 'VALIDATION_ERROR', 'no jobs')
  assertError(t, await s.req('POST', '/v1/batch', { key: u.key, body: { jobs: 'x' } }), 400, 'VALIDATION_ERROR', 'jobs not an array')
  t.equal(await balance(s, u), 1000)
  const ten = await batch(u, Array.from({ length: 10 }, (_, i) => img(`n${i}`)))
  t.equal(ten.status, 200, '10 items')
  t.equal(ten.body.results.length, 10)
  t.equal(ten.body.credits_charged, 100)
  const one = await batch(u, [img()])
  t.equal(one.status, 200, '1 item')
})

t.test('per-item results {index, type, status, job}, in order, with totals; each item charged individually', async (t) => {
  const u = await paidUser(s, 1000)
  const r = await batch(u, [img('first'), vid(), img('third', { model: 'gpt-image-2', resolution: '2K' })])
  t.equal(r.status, 200, r.text)
  t.same(Object.keys(r.body).sort(), ['credits_charged', 'estimated_credits', 'remaining_credits', 'results'])
  t.equal(r.body.estimated_credits, 150)
  t.equal(r.body.credits_charged, 150)
  t.equal(r.body.remaining_credits, 850)
  t.same(r.body.results.map((x: any) => [x.index, x.type, x.status]), [[0, 'image', 201], [1, 'video', 201], [2, 'image', 201]])
  for (const x of r.body.results) {
    t.match(x.job, { id: /^job_/, status: 'submitted' }, `item ${x.index} carries its CreatedJob`)
    t.notOk('error' in x)
  }
  t.same(r.body.results.map((x: any) => x.job.credits_charged), [10, 120, 20])
  t.same(r.body.results.map((x: any) => x.job.model), ['nano-banana', 'veo3-fast', 'gpt-image-2'])
  t.equal(await balance(s, u), 850)
  const charges = (await ledger(sql, u.id)).filter(e => e.kind === 'charge')
  t.same(charges.map(e => e.job_id), r.body.results.map((x: any) => x.job.id), 'one charge per item, in submission order')
  const done = await pollJob(s, u, r.body.results[1].job.id)
  t.equal(done.job.status, 'completed', 'batch jobs run like any other')
})

t.test('the first 402 stops submission: later items are SKIPPED (status null) and not charged; other errors do not stop it', async (t) => {
  const u = await paidUser(s, 150)
  const r = await batch(u, [
    img('a'), // 10 -> 140
    { type: 'video', model: 'grok-video', prompt: 'x', duration: '6', resolution: '480p', image_url: 'https://example.com/a.png', last_frame_url: 'https://example.com/b.png' }, // 422
    img('[sim:reject]'), // 502, nothing charged
    vid(), // 120 -> 20
    img('d', { model: 'nano-banana-pro' }), // 30 > 20: 402, stop
    img('e'), // would fit (10) but SKIPPED
    vid('f'), // SKIPPED
  ])
  t.equal(r.status, 200, r.text)
  const res = r.body.results
  t.same(res.map((x: any) => x.status), [201, 422, 502, 201, 402, null, null])
  t.equal(res[1].error.code, 'UNSUPPORTED_OPTION')
  t.equal(res[1].error.error, true, 'per-item errors use the error envelope')
  t.equal(res[1].error.param, 'last_frame_url')
  t.equal(res[1].type, 'video')
  t.notOk(res[1].job)
  t.equal(res[2].error.code, 'PROVIDER_ERROR')
  t.equal(res[4].error.code, 'INSUFFICIENT_CREDITS')
  t.type(res[4].error.message, 'string')
  for (const i of [5, 6]) {
    t.equal(res[i].error.code, 'SKIPPED', `item ${i} SKIPPED`)
    t.equal(res[i].status, null)
    t.notOk(res[i].job)
  }
  t.same(res.map((x: any) => x.index), [0, 1, 2, 3, 4, 5, 6])
  t.same(res.map((x: any) => x.type), ['image', 'video', 'image', 'video', 'image', 'image', 'video'])
  t.equal(r.body.credits_charged, 130)
  t.equal(r.body.remaining_credits, 20)
  t.equal(r.body.estimated_credits, 10 + 10 + 120 + 30 + 10 + 120, 'the price of every valid item')
  t.equal(await balance(s, u), 20)
  t.equal(await jobCount(u), 2, 'only the two created jobs exist')
})

t.test('invalid items (unknown type, schema errors) are reported per item with type null or their type', async (t) => {
  const u = await paidUser(s, 1000)
  const r = await batch(u, [{ type: 'audio', model: 'music' }, { type: 'image', prompt: 'no model' }, img(), 'not an object'])
  t.equal(r.status, 200, r.text)
  const res = r.body.results
  t.same(res.map((x: any) => x.status), [400, 400, 201, 400])
  t.equal(res[0].type, null)
  t.equal(res[1].type, 'image')
  t.equal(res[3].type, null)
  t.ok(res.filter((x: any) => x.status === 400).every((x: any) => x.error.code === 'VALIDATION_ERROR'))
  t.equal(r.body.credits_charged, 10)
  t.equal(r.body.estimated_credits, 10)
})

t.test('a content-policy item is refused on its own (403) and the rest go through', async (t) => {
  const u = await paidUser(s, 1000)
  const r = await batch(u, [img('forbidden-test-term'), img('fine')])
  t.equal(r.status, 200)
  t.same(r.body.results.map((x: any) => x.status), [403, 201])
  t.equal(r.body.results[0].error.code, 'CONTENT_POLICY_VIOLATION')
  t.equal(r.body.credits_charged, 10)
})

t.test('an item that times out at the provider (504, job created and charged) counts in credits_charged', async (t) => {
  const u = await paidUser(s, 1000)
  const r = await batch(u, [img('ok'), img('slow [sim:timeout]')])
  t.equal(r.status, 200, r.text)
  t.same(r.body.results.map((x: any) => x.status), [201, 504])
  const res = r.body.results[1]
  t.equal(res.error.code, 'GATEWAY_TIMEOUT')
  t.match(res.error.details?.job_id, /^job_/, 'the 504 names its job')
  t.equal(r.body.remaining_credits, 980, 'both charged')
  t.equal(r.body.credits_charged, 20, 'the totals agree with the balance: the timed-out job was charged too')
})

t.test('a batch interrupted by a shard crash and retried with the same Idempotency-Key charges no item twice', async (t) => {
  const u = await paidUser(s, 1000)
  // Each [sim:timeout] item holds the batch for SUBMIT_TIMEOUT_MS (300 ms): 6 of them take ~1.8 s.
  const jobs = Array.from({ length: 6 }, (_, i) => img(`${i} [sim:timeout]`))
  const body = { jobs }
  const first = s.req('POST', '/v1/batch', { key: u.key, body, headers: { 'idempotency-key': 'crashy-batch' } })
  await waitFor(async () => (await sql`SELECT 1 FROM jobs WHERE account_id = ${u.id}`).length > 0, { what: 'the batch to have created its first item', everyMs: 20 })
  const pool = s.app.services.shards
  await pool.crash(pool.shardOf(u.id))
  const r1 = await first
  assertError(t, r1, 500, 'INTERNAL_ERROR', 'the crash fails the batch in flight')
  const [{ n: before }] = await sql`SELECT count(*)::int AS n FROM jobs WHERE account_id = ${u.id}`
  t.ok(before >= 1 && before < 6, `${before} items were created before the crash`)

  let r2: any
  await waitFor(async () => (r2 = await s.req('POST', '/v1/batch', { key: u.key, body, headers: { 'idempotency-key': 'crashy-batch' } })).status !== 500,
    { what: 'the shard to restart and the retried batch to answer', everyMs: 100 })
  t.equal(r2.status, 200, 'the retry completes the batch')
  const ids = r2.body.results.map((x: any) => x.job?.id ?? x.error?.details?.job_id)
  t.equal(new Set(ids).size, 6, 'six distinct jobs named')
  const [{ n: after }] = await sql`SELECT count(*)::int AS n FROM jobs WHERE account_id = ${u.id}`
  t.equal(after, 6, 'one job per item: the items created before the crash were not created again')
  const [{ charges }] = await sql`SELECT count(*)::int AS charges FROM credit_entries WHERE account_id = ${u.id} AND kind = 'charge'`
  t.equal(charges, 6, 'one charge per item')
})

t.test('replaying a batch that holds a flagged item does not count new content violations', async (t) => {
  const u = await paidUser(s, 1000)
  const body = { jobs: [img('forbidden-test-term'), img('fine')] }
  const headers = { 'idempotency-key': 'flagged-batch' }
  const first = await s.req('POST', '/v1/batch', { key: u.key, body, headers })
  t.same(first.body.results.map((x: any) => x.status), [403, 201])
  for (let i = 0; i < 3; i++) {
    const r = await s.req('POST', '/v1/batch', { key: u.key, body, headers })
    t.equal(r.status, 200, `replay ${i + 1}`)
    t.equal(r.body.replayed, true)
  }
  const [row] = await sql`SELECT policy_violations, banned FROM accounts WHERE id = ${u.id}`
  t.same({ ...row }, { policy_violations: 1, banned: false }, 'one violation, from the one real submission')
  t.equal((await s.req('GET', '/v1/credits', { key: u.key })).status, 200, 'not suspended')
})
