// The credit ledger invariants of docs/architecture.md "Durability", checked in SQL after real
// traffic: accounts.credits = sum(credit_entries.delta); one charge per job; every failed or
// cancelled job refunded exactly once, in full; nothing overspent under concurrency.
import t from 'tap'
import { startServer, type TestServer, type TestUser } from '../helpers/server.js'
import { dbOf, FAST_ENV, image, paidUser, pollJob, video } from '../helpers/jobs.js'
import { sleep, waitFor } from '../helpers/wait.js'

const s = await startServer(t, FAST_ENV)
const sql = dbOf(t, s)

/** Checks every invariant over the whole database; returns the number of jobs checked. */
async function checkLedger (t: any): Promise<number> {
  const drift = await sql`
    SELECT a.id, a.credits, coalesce(sum(e.delta), 0)::bigint AS total
    FROM accounts a LEFT JOIN credit_entries e ON e.account_id = a.id
    GROUP BY a.id HAVING a.credits <> coalesce(sum(e.delta), 0)`
  t.same(drift, [], 'accounts.credits = sum(credit_entries.delta) for every account')

  const badCharges = await sql`
    SELECT j.id, j.credits_charged, count(e.id)::int AS n, coalesce(sum(e.delta), 0)::bigint AS total
    FROM jobs j LEFT JOIN credit_entries e ON e.job_id = j.id AND e.kind = 'charge'
    GROUP BY j.id HAVING count(e.id) <> 1 OR coalesce(sum(e.delta), 0) <> -j.credits_charged`
  t.same(badCharges, [], 'every job has exactly one charge entry, of its price')

  const badRefunds = await sql`
    SELECT j.id, j.status, j.credits_charged, j.credits_refunded, count(e.id)::int AS n, coalesce(sum(e.delta), 0)::bigint AS total
    FROM jobs j LEFT JOIN credit_entries e ON e.job_id = j.id AND e.kind = 'refund'
    GROUP BY j.id
    HAVING (j.status IN ('failed', 'cancelled') AND (count(e.id) <> 1 OR coalesce(sum(e.delta), 0) <> j.credits_charged OR j.credits_refunded <> j.credits_charged))
        OR (j.status NOT IN ('failed', 'cancelled') AND (count(e.id) <> 0 OR j.credits_refunded <> 0))`
  t.same(badRefunds, [], 'failed/cancelled jobs: exactly one refund equal to the charge; others: none')

  const orphans = await sql`
    SELECT e.id, e.kind, e.job_id FROM credit_entries e LEFT JOIN jobs j ON j.id = e.job_id
    WHERE (e.kind IN ('charge', 'refund') AND (e.job_id IS NULL OR j.id IS NULL)) OR (e.kind NOT IN ('charge', 'refund') AND e.job_id IS NOT NULL)`
  t.same(orphans, [], 'charges and refunds always name an existing job; other kinds never do')

  const negative = await sql`SELECT id FROM accounts WHERE credits < 0`
  t.same(negative, [], 'no balance below zero')
  const [{ n }] = await sql`SELECT count(*)::int AS n FROM jobs`
  return n
}

async function settle (): Promise<void> {
  // Wait until no job is in flight except the deliberately queued ones (cancelled later).
  let n = -1
  await waitFor(async () => ([{ n }] = await sql`SELECT count(*)::int AS n FROM jobs WHERE status IN ('submitted', 'processing')`, n === 0),
    { what: () => `jobs to settle (${n} submitted or processing)`, timeoutMs: 20_000, everyMs: 50 })
}

const post = (u: TestUser, kind: string, body: unknown, key?: string) =>
  s.req('POST', kind === 'batch' ? '/v1/batch' : kind === 'extend' ? '/v1/extend/video' : `/v1/generate/${kind}`, { key: u.key, body, headers: key ? { 'idempotency-key': key } : {} })

async function mixedTraffic (srv: TestServer, u: TestUser, seed: number): Promise<void> {
  const prompts = ['plain', 'x [sim:fail]', 'x [sim:policy]', 'x [sim:queue]', 'x [sim:timeout]', 'x [sim:reject]']
  const reqs: Array<Promise<any>> = []
  for (let i = 0; i < 24; i++) {
    const p = `${prompts[(i * 7 + seed) % prompts.length]} ${i}`
    const key = i % 4 === 0 ? `k-${seed}-${i % 8}` : undefined // some repeated keys: replays
    if (i % 3 === 0) reqs.push(post(u, 'video', video(p), key))
    else if (i % 3 === 1) reqs.push(post(u, 'image', image(p, { model: i % 2 ? 'nano-banana' : 'nano-banana-pro' }), key))
    else reqs.push(post(u, 'audio', { model: 'music', title: 't', style: p, instrumental: true }, key))
  }
  reqs.push(post(u, 'batch', { jobs: [{ type: 'image', ...image('b1') }, { type: 'image', ...image('b2 [sim:fail]') }, { type: 'video', ...video('b3 [sim:queue]') }] }))
  reqs.push(post(u, 'audio', { model: 'voiceover', text: 'sync voice', voice_id: 'v' }))
  const rs = await Promise.all(reqs)
  for (const r of rs) if (![200, 201, 402, 409, 502, 504].includes(r.status)) throw new Error(`unexpected ${r.status} ${r.text}`)
  void srv
}

t.test('after creations, failures, policy flags, timeouts, cancels, replays and a batch, every ledger invariant holds', async (t) => {
  const users = [await paidUser(s, 5000), await paidUser(s, 5000), await paidUser(s, 400)]
  await Promise.all(users.map((u, i) => mixedTraffic(s, u, i)))
  // A replay of a created job, a cancel of every queued job (some twice, concurrently).
  for (const u of users) {
    const queued = await sql`SELECT id FROM jobs WHERE account_id = ${u.id} AND status = 'queued'`
    const dels = await Promise.all(queued.flatMap(q => [s.req('DELETE', `/v1/jobs/${q.id}`, { key: u.key }), s.req('DELETE', `/v1/jobs/${q.id}`, { key: u.key })]))
    t.equal(dels.filter(d => d.status === 200).length, queued.length, `account ${u.id}: each queued job cancelled once`)
    t.equal(dels.filter(d => d.status === 409).length, queued.length, 'the concurrent second DELETE is 409 CANNOT_CANCEL')
  }
  // Let the timed-out submissions reach their deadline (3 s at SIM_SPEED 200) and the rest finish.
  await settle()
  const [{ n: live }] = await sql`SELECT count(*)::int AS n FROM jobs WHERE status NOT IN ('completed', 'failed', 'cancelled')`
  t.equal(live, 0, 'every job reached a terminal state')
  const byStatus = await sql`SELECT status, count(*)::int AS n FROM jobs GROUP BY status ORDER BY status`
  const statuses = Object.fromEntries(byStatus.map(r => [r.status, r.n]))
  t.ok(statuses.completed > 0 && statuses.failed > 0 && statuses.cancelled > 0, `a real mix: ${JSON.stringify(statuses)}`)
  const [{ n: policy }] = await sql`SELECT count(*)::int AS n FROM jobs WHERE content_policy_violation`
  t.ok(policy > 0, 'policy-flagged jobs included')
  const n = await checkLedger(t)
  t.ok(n >= 30, `${n} jobs checked`)

  // The balances the API reports are the snapshot.
  for (const u of users) {
    const r = await s.req('GET', '/v1/credits', { key: u.key })
    const [{ credits }] = await sql`SELECT credits FROM accounts WHERE id = ${u.id}`
    t.equal(r.body.credits, credits, `account ${u.id}: /v1/credits = accounts.credits`)
  }
})

t.test('200 concurrent creations with balance for exactly 150: 150 answer 201, 50 answer 402, balance ends at 0', async (t) => {
  const u = await paidUser(s, 1500)
  const rs = await Promise.all(Array.from({ length: 200 }, (_, i) => post(u, 'image', image(`img ${i}`))))
  const codes = rs.reduce<Record<number, number>>((m, r) => { m[r.status] = (m[r.status] ?? 0) + 1; return m }, {})
  t.same(codes, { 201: 150, 402: 50 }, 'exactly 150 created, 50 refused')
  t.ok(rs.filter(r => r.status === 402).every(r => r.body.code === 'INSUFFICIENT_CREDITS'))
  const remaining = rs.filter(r => r.status === 201).map(r => r.body.remaining_credits).sort((a, b) => a - b)
  t.same(remaining, Array.from({ length: 150 }, (_, i) => i * 10), 'each 201 reports a distinct balance after its charge')
  const r = await s.req('GET', '/v1/credits', { key: u.key })
  t.equal(r.body.credits, 0)
  const [{ n }] = await sql`SELECT count(*)::int AS n FROM jobs WHERE account_id = ${u.id}`
  t.equal(n, 150, '150 job rows')
  await settle()
  t.equal((await s.req('GET', '/v1/credits', { key: u.key })).body.credits, 0, 'still 0 once they completed')
  await checkLedger(t)
})

t.test('concurrent mixed job types on one account never overspend', async (t) => {
  const u = await paidUser(s, 1000)
  const bodies: Array<[string, unknown]> = []
  for (let i = 0; i < 60; i++) bodies.push(i % 3 === 0 ? ['video', video(`v${i}`)] : i % 3 === 1 ? ['image', image(`i${i}`, { model: 'nano-banana-pro' })] : ['audio', { model: 'voiceover', text: 'y'.repeat(20 + i), voice_id: 'v' }])
  const rs = await Promise.all(bodies.map(([k, b]) => post(u, k, b)))
  const spent = rs.filter(r => r.status === 201).reduce((a, r) => a + r.body.credits_charged, 0)
  t.ok(rs.every(r => r.status === 201 || r.status === 402), 'only 201 and 402')
  const bal = (await s.req('GET', '/v1/credits', { key: u.key })).body.credits
  t.equal(bal, 1000 - spent, 'balance = start - sum of the 201s\' charges')
  t.ok(bal >= 0 && bal < 120, `what is left cannot buy the cheapest refused job (${bal})`)
  await settle()
  await checkLedger(t)
})

t.test('a job refunded by its deadline and cancelled concurrently is refunded once', async (t) => {
  const u = await paidUser(s, 1000)
  // Queued jobs are held forever by the simulated provider; their deadline (3 s) fails them.
  const q = await post(u, 'image', image('[sim:queue] race'))
  t.equal(q.status, 201)
  const deadline = Date.parse((await s.req('GET', `/v1/jobs/${q.body.id}`, { key: u.key })).body.created_at) + 3000
  await sleep(Math.max(0, deadline - Date.now() - 15)) // time: the cancels must race the deadline itself
  const dels = await Promise.all(Array.from({ length: 5 }, () => s.req('DELETE', `/v1/jobs/${q.body.id}`, { key: u.key })))
  const { job } = await pollJob(s, u, q.body.id)
  const won = dels.filter(d => d.status === 200).length
  t.ok(won <= 1, 'at most one cancel won')
  t.equal(job.status, won === 1 ? 'cancelled' : 'failed', `ended by ${won === 1 ? 'the cancel that won' : 'its deadline'}`)
  t.equal(job.credits_refunded, 10)
  t.equal((await s.req('GET', '/v1/credits', { key: u.key })).body.credits, 1000)
  await checkLedger(t)
})
