// endJob (src/db/ledger.ts): a failure or a cancellation in one statement. The job turns
// terminal only from a non-terminal state; a failure gets its outbox rows (registered webhooks
// subscribed to job.failed and the job's own webhook, one event id, the final view as body), a
// cancellation none; the refund and its ledger entry, the free video given back and the upstream
// events commit with it, or nothing does.
import t from 'tap'
import { connect } from '../../src/db/connect.js'
import { migrate } from '../../src/db/migrate.js'
import { endJob } from '../../src/db/ledger.js'
import type { JobRow } from '../../src/jobs/view.js'
import { freshDatabase } from '../helpers/db.js'

const sql = connect(await freshDatabase(t), { max: 2 })
t.teardown(() => sql.end({ timeout: 5 }))
await migrate(sql)

async function account (credits: number, freeUsed = 0): Promise<number> {
  const [{ id }] = await sql<{ id: number }[]>`INSERT INTO accounts (email, password_hash, credits, free_videos_used)
    VALUES (${`ej${Math.random()}@example.com`}, 'x', ${credits}, ${freeUsed}) RETURNING id`
  return id
}

let seq = 0
/** A job row as charged and stored: `credits` already taken from the account. */
async function job (accountId: number, credits: number, o: Partial<JobRow> = {}): Promise<JobRow> {
  const now = new Date()
  const r = {
    id: `job_ej${String(++seq).padStart(14, '0')}`, account_id: accountId, key_id: null, type: 'video', model: 'veo3-fast', status: 'processing',
    prompt: 'p', request: { model: 'veo3-fast', prompt: 'p' }, progress: 40, credits_charged: credits, credits_refunded: 0,
    estimated_seconds: 15, result_url: null, error_message: null, content_policy_violation: false, provider: 'simulated', provider_job_id: `sim_${seq}`,
    idempotency_key: null, request_hash: null, source_job_id: null, free_trial: false, deadline_at: null,
    created_at: now, updated_at: now, completed_at: null, owner: null, lease_until: null, ...o,
  } as JobRow
  await sql`INSERT INTO jobs (id, account_id, type, model, status, prompt, request, progress, credits_charged, estimated_seconds, provider, free_trial,
      deadline_at)
    VALUES (${r.id}, ${accountId}, ${r.type}, ${r.model}, ${r.status}, ${r.prompt}, ${sql.json(r.request as any)}, ${r.progress}, ${credits},
      ${r.estimated_seconds}, ${r.provider}, ${r.free_trial}, ${new Date(now.getTime() + 600_000)})`
  return r
}

const balance = async (id: number) => (await sql<{ credits: number; used: number }[]>`
  SELECT credits::int, free_videos_used AS used FROM accounts WHERE id = ${id}`)[0]
const refunds = (jobId: string) => sql<{ delta: number; note: string }[]>`
  SELECT delta::int, note FROM credit_entries WHERE job_id = ${jobId} AND kind = 'refund'`
const outbox = (jobId: string) => sql<{ id: string; event_id: string; webhook_id: number | null; event: string; url: string; secret: string; body: string }[]>`
  SELECT id, event_id, webhook_id::int, event, url, secret, body FROM webhook_deliveries WHERE job_id = ${jobId} ORDER BY url`

t.test('a failure: terminal row, outbox rows for subscribed and own webhooks, refund with its entry, events, balance returned', async (t) => {
  const a = await account(100)
  await sql`INSERT INTO webhooks (account_id, url, secret, events) VALUES
    (${a}, 'https://a.example/hook', 'whsec_a', '{job.failed}'),
    (${a}, 'https://b.example/hook', 'whsec_b', '{job.completed}')`
  await sql`INSERT INTO webhooks (account_id, url, secret, events, deleted_at) VALUES (${a}, 'https://c.example/hook', 'whsec_c', '{job.failed}', now())`
  const r = await job(a, 30, { request: { model: 'veo3-fast', prompt: 'p', webhook_url: 'https://own.example/x', webhook_secret: 'whsec_own' } })
  const at = new Date()
  const events = [
    { job_id: r.id, source: 'poll' as const, route: 'veo#0', state: 'failed', detail: { code: 'E1' }, at },
    { job_id: r.id, source: 'cancel' as const, route: 'veo#0', state: 'sent', detail: null },
  ]
  const got = await sql.begin(tx => endJob(tx, r, 'failed', 'provider said no', true, at, events, b => ({ ...b, stamped: 1 })))
  t.same(got, { credits: 130, stamped: 1 }, 'the balance after the refund, through the callback')
  const [j] = await sql<any[]>`SELECT status, progress, error_message, content_policy_violation, credits_refunded, completed_at FROM jobs WHERE id = ${r.id}`
  t.match(j, { status: 'failed', progress: 40, error_message: 'provider said no', content_policy_violation: true, credits_refunded: 30 })
  t.equal(j.completed_at.getTime(), at.getTime())
  t.same(await balance(a), { credits: 130, used: 0 })
  t.same((await refunds(r.id)).map(e => [e.delta, e.note]), [[30, 'failed video veo3-fast']])
  const rows = await outbox(r.id)
  t.same(rows.map(x => [x.url, x.secret, x.event, x.webhook_id === null]), [
    ['https://a.example/hook', 'whsec_a', 'job.failed', false],
    ['https://own.example/x', 'whsec_own', 'job.failed', true],
  ], 'the subscribed registered webhook and the own one; not the one for job.completed nor the deleted one')
  t.ok(rows.every(x => /^dlv_[A-Za-z0-9_-]{16}$/.test(x.id)), 'delivery ids dlv_ + 16 base64url')
  t.equal(rows[0].event_id, rows[1].event_id, 'one event')
  t.equal(rows[0].body, rows[1].body, 'the same signed bytes for both')
  const body = JSON.parse(rows[0].body)
  t.match(body, { id: rows[0].event_id, type: 'job.failed', data: { job: { id: r.id, status: 'failed', credits_refunded: 30, error_message: 'provider said no' } } })
  const ev = await sql<any[]>`SELECT source, route, state, detail FROM job_upstream_events WHERE job_id = ${r.id} ORDER BY id`
  t.same(ev.map(e => [e.source, e.route, e.state, e.detail]), [['poll', 'veo#0', 'failed', { code: 'E1' }], ['cancel', 'veo#0', 'sent', null]], 'events in order')
})

t.test('a cancellation: no outbox rows; a free-trial video with nothing charged gives the video back and writes no entry', async (t) => {
  const a = await account(5, 1)
  await sql`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${a}, 'https://a.example/hook', 'whsec_a', '{job.failed,job.completed}')`
  const r = await job(a, 0, { status: 'queued', progress: 0, free_trial: true, request: { model: 'veo3-fast', prompt: 'p', webhook_url: 'https://own.example/x', webhook_secret: 's' } })
  const got = await sql.begin(tx => endJob(tx, r, 'cancelled', 'Cancelled by the client; credits refunded', false, new Date()))
  t.same(got, { credits: null }, 'no refund, no balance')
  t.same(await balance(a), { credits: 5, used: 0 }, 'the free video given back')
  t.same(await refunds(r.id), [])
  t.same(await outbox(r.id), [], 'cancelled jobs have no event (SPEC.md 6.1)')
  const again = await job(a, 0, { status: 'queued', progress: 0, free_trial: true })
  await sql.begin(tx => endJob(tx, again, 'cancelled', null, false, new Date()))
  t.same(await balance(a), { credits: 5, used: 0 }, 'never below zero')
})

t.test('a job already terminal: false, and nothing written', async (t) => {
  const a = await account(50)
  await sql`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${a}, 'https://a.example/hook', 'whsec_a', '{job.failed}')`
  const r = await job(a, 20, { status: 'completed' })
  const got = await sql.begin(tx => endJob(tx, r, 'failed', 'late', false, new Date(), [{ job_id: r.id, source: 'poll', route: null, state: 'failed' }]))
  t.equal(got, false)
  t.same(await balance(a), { credits: 50, used: 0 })
  t.same(await refunds(r.id), [])
  t.same(await outbox(r.id), [])
  const [n] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM job_upstream_events WHERE job_id = ${r.id}`
  t.equal(n.n, 0)
  const [j] = await sql<{ status: string }[]>`SELECT status FROM jobs WHERE id = ${r.id}`
  t.equal(j.status, 'completed')
})

t.test('a refund whose statement fails rolls back with the rest of its transaction', async (t) => {
  const a = await account(10)
  const r = await job(a, 10)
  await t.rejects(sql.begin(async tx => {
    await endJob(tx, r, 'failed', 'x', false, new Date())
    await tx`SELECT 1/0`
  }))
  const [j] = await sql<{ status: string }[]>`SELECT status FROM jobs WHERE id = ${r.id}`
  t.equal(j.status, 'processing')
  t.same(await balance(a), { credits: 10, used: 0 })
  t.same(await refunds(r.id), [])
})
