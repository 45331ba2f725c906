// A single creation through the batch statement (writeBatch, src/db/ledger.ts: the one form
// of a creation's charge, ledger entry and job row), leases and held jobs, against a real PostgreSQL.
import t from 'tap'
import { connect } from '../../src/db/connect.js'
import { claimJobs, heldJobs, idemPair, jobsByIdempotencyKeys, renewShardLease, type NewJob } from '../../src/db/jobs.js'
import { writeBatch, type Balance } from '../../src/db/ledger.js'
import { migrate } from '../../src/db/migrate.js'
import { freshDatabase } from '../helpers/db.js'

const sql = connect(await freshDatabase(t), { max: 2 })
t.teardown(() => sql.end({ timeout: 5 }))
await migrate(sql)
const [{ id: accountId }] = await sql<{ id: number }[]>`INSERT INTO accounts (email, password_hash, credits) VALUES ('db-jobs@example.com', 'x', 25) RETURNING id`
await sql`INSERT INTO credit_entries (account_id, delta, kind) VALUES (${accountId}, 25, 'grant')`

const job = (id: string, credits: number): NewJob => ({
  id, account_id: accountId, key_id: null, type: 'image', model: 'nano-banana', status: 'submitted', prompt: 'p', request: { model: 'nano-banana', prompt: 'p' },
  credits_charged: credits, estimated_seconds: 15, provider: 'simulated', provider_job_id: 'sim_1', idempotency_key: null, request_hash: null,
  source_job_id: null, free_trial: false, deadline_at: new Date(Date.now() + 600_000), created_at: new Date(),
} as NewJob)
/** One creation alone: the account's balance after it, or null when the statement refused the charge (nothing written). */
const createOne = async (j: NewJob): Promise<Balance | null> =>
  (await writeBatch(sql, { creations: [j], records: [null], completions: [], transitions: [] })).charged.get(j.account_id) ?? null
const state = async () => (await sql<{ credits: number; entries: number; sum: number; jobs: number }[]>`
  SELECT (SELECT credits FROM accounts WHERE id = ${accountId}) AS credits,
    (SELECT count(*)::int FROM credit_entries WHERE account_id = ${accountId}) AS entries,
    (SELECT sum(delta)::int FROM credit_entries WHERE account_id = ${accountId}) AS sum,
    (SELECT count(*)::int FROM jobs WHERE account_id = ${accountId}) AS jobs`)[0]

t.test('a covered price: balance, one charge entry and the job, the new balance returned', async (t) => {
  t.same(await createOne(job('job_dbtest_1', 10)), { credits: 15, free_videos_used: 0 })
  t.same(await state(), { credits: 15, entries: 2, sum: 15, jobs: 1 })
  const [e] = await sql`SELECT delta, kind, job_id, note FROM credit_entries WHERE job_id = 'job_dbtest_1'`
  t.same({ ...e }, { delta: -10, kind: 'charge', job_id: 'job_dbtest_1', note: 'image nano-banana' })
})

t.test('an uncovered price returns null and writes nothing', async (t) => {
  t.equal(await createOne(job('job_dbtest_2', 20)), null)
  t.same(await state(), { credits: 15, entries: 2, sum: 15, jobs: 1 }, 'no entry, no job, balance unchanged')
})

t.test('the free-trial video is taken by the charge itself: a second trial charge is refused', async (t) => {
  const trial = (id: string): NewJob => ({ ...job(id, 5), type: 'video', model: 'video', free_trial: true })
  t.same(await createOne(trial('job_dbtest_t1')), { credits: 10, free_videos_used: 1 })
  t.equal(await createOne(trial('job_dbtest_t2')), null, 'refused: the one free video is used')
  await sql`UPDATE accounts SET has_purchased = true WHERE id = ${accountId}`
  t.same(await createOne(trial('job_dbtest_t3')), { credits: 5, free_videos_used: 2 }, 'after a purchase the condition no longer applies')
})

t.test('held jobs: the running jobs of this node among the ids asked', async (t) => {
  for (const id of ['job_dbtest_l1', 'job_dbtest_l2', 'job_dbtest_l3']) {
    await sql`INSERT INTO jobs (id, account_id, type, model, status, request, credits_charged, estimated_seconds, provider, deadline_at, owner, lease_until)
      VALUES (${id}, ${accountId}, 'image', 'nano-banana', 'processing', '{}', 0, 15, 'simulated', now() + interval '10 minutes', 'node-a', now())`
  }
  await sql`UPDATE jobs SET status = 'completed' WHERE id = 'job_dbtest_l3'`
  const held = await heldJobs(sql, 'node-a', ['job_dbtest_l1', 'job_dbtest_l2', 'job_dbtest_l3', 'job_dbtest_none'])
  t.same([...held].sort(), ['job_dbtest_l1', 'job_dbtest_l2'], 'running and ours; not the ended one, not an unknown id')
  t.same([...await heldJobs(sql, 'node-b', ['job_dbtest_l1'])], [], 'not ours: not held')
  t.same([...await heldJobs(sql, 'node-a', [])], [])
})

t.test('shard leases: a job moves only when its grace is over and its owner shard stopped renewing', async (t) => {
  const insert = (id: string, owner: string | null, graceSec: number) => sql`INSERT INTO jobs (id, account_id, type, model, status, request, credits_charged,
      estimated_seconds, provider, deadline_at, owner, lease_until)
    VALUES (${id}, ${accountId}, 'image', 'nano-banana', 'queued', '{}', 0, 15, 'simulated', now() + interval '10 minutes', ${owner},
      now() + make_interval(secs => ${graceSec}))`
  const claimed = async (node: string, shard: number, shards: number, own = false) =>
    (await claimJobs(sql, node, shard, shards, own)).map(r => r.id).filter(id => id.startsWith('job_dbtest_s')).sort()
  await sql`UPDATE jobs SET status = 'completed' WHERE status IN ('queued', 'submitted', 'processing')`
  await renewShardLease(sql, 'node-s', 0, 1)
  await insert('job_dbtest_s1', 'node-s', -60) // grace over, owner shard alive
  await insert('job_dbtest_s2', 'node-gone', 60) // owner unknown, grace still running
  await insert('job_dbtest_s3', 'node-gone', -60) // owner unknown, grace over
  await insert('job_dbtest_s4', null, 60) // unowned
  t.same(await claimed('node-b', 0, 1), ['job_dbtest_s3', 'job_dbtest_s4'], 'the orphan and the unowned job; not a live shard\'s, not one in its grace')
  t.same(await claimed('node-b', 0, 1), [], 'claimed jobs are held by their new owner (fresh grace)')
  await sql`UPDATE shard_leases SET lease_until = now() - interval '1 second' WHERE node = 'node-s'`
  t.same(await claimed('node-b', 0, 1), ['job_dbtest_s1'], 'once the owner shard\'s lease lapsed, its job moves')
  // The lease of another shard of the same node does not hold this account's jobs.
  const other = (accountId + 1) % 2
  await renewShardLease(sql, 'node-t', other, 2)
  await insert('job_dbtest_s5', 'node-t', -60)
  t.same(await claimed('node-b', accountId % 2, 2), ['job_dbtest_s5'], 'a lease of the job\'s own shard is needed')
  await renewShardLease(sql, 'node-t', accountId % 2, 2)
  await insert('job_dbtest_s6', 'node-t', -60)
  t.same(await claimed('node-b', accountId % 2, 2), [], 'with it, the job stays')
  t.same(await claimed('node-t', accountId % 2, 2, true), ['job_dbtest_s6'], 'its own node takes it back at boot')
  const [l] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM shard_leases WHERE node = 'node-t'`
  t.equal(l.n, 2, 'one row per shard, however many jobs')
})

t.test('Idempotency-Keys: the jobs of many (account, key) pairs in one statement, on the unique index', async (t) => {
  const [{ id: other }] = await sql<{ id: number }[]>`INSERT INTO accounts (email, password_hash, credits) VALUES ('db-jobs-other@example.com', 'x', 0) RETURNING id`
  const keyed = async (id: string, account: number, key: string, hash: string | null) => sql`
    INSERT INTO jobs (id, account_id, type, model, status, request, credits_charged, estimated_seconds, provider, deadline_at, idempotency_key, request_hash)
    VALUES (${id}, ${account}, 'image', 'nano-banana', 'completed', '{}', 0, 15, 'simulated', now(), ${key}, ${hash})`
  await keyed('job_dbtest_k1', accountId, 'order-1', 'fp1')
  await keyed('job_dbtest_k2', accountId, 'order.2_x-y', null)
  await keyed('job_dbtest_k3', other, 'order-3', 'fp3')
  const rows = await jobsByIdempotencyKeys(sql, [idemPair(accountId, 'order-1'), idemPair(accountId, 'order.2_x-y'), idemPair(accountId, 'order-3'), idemPair(other, 'order-3'), idemPair(other, 'order-1'), idemPair(accountId, 'none')])
  t.same(rows.map(r => ({ ...r })).sort((a, b) => a.id.localeCompare(b.id)), [
    { pair: `${accountId} order-1`, id: 'job_dbtest_k1', request_hash: 'fp1' },
    { pair: `${accountId} order.2_x-y`, id: 'job_dbtest_k2', request_hash: null },
    { pair: `${other} order-3`, id: 'job_dbtest_k3', request_hash: 'fp3' },
  ], 'each key only under its own account; unknown pairs have no row')
  t.same(await jobsByIdempotencyKeys(sql, []), [])
  const plan = (await sql.unsafe(`EXPLAIN SELECT j.id FROM unnest('{${accountId}}'::bigint[], '{"order-1"}'::text[]) AS k(account_id, key)
    JOIN jobs j ON j.account_id = k.account_id AND j.idempotency_key = k.key AND j.idempotency_key IS NOT NULL`)).map((r: any) => r['QUERY PLAN']).join('\n')
  t.match(plan, /jobs_idempotency/, 'the lookup uses the unique (account_id, idempotency_key) index')
})
