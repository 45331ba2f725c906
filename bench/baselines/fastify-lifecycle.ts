/**
 * Baseline for `job-lifecycle`: the same work done "the usual way", a Fastify 5 route plus
 * postgres.js (pool PG_POOL, default 10) on its own tables (bench_*, same columns and indexes
 * as the service's accounts, credit_entries, jobs, images, webhooks, webhook_deliveries) in the
 * scenario's database:
 *   create:     BEGIN; UPDATE accounts ... WHERE credits >= price; INSERT ledger; INSERT job; COMMIT
 *   each poll:  UPDATE bench_jobs SET status, progress, updated_at (one autocommit statement)
 *   completion: write the result file (the simulated provider's sample.png); BEGIN; UPDATE the
 *               job (completed, result_url, completed_at); SELECT the account's webhooks;
 *               INSERT one outbox row per webhook; INSERT the library row (bench_images); COMMIT
 *   each request: one usage row (INSERT INTO bench_request_log, autocommit, once answered:
 *               usual-create.ts meterRequests), as the service meters every request
 * A timer per job stands in for the provider: it "polls" at the service's cadence for the same
 * simulated duration (SIM_SPEED), re-armed after each poll's write like the service's JobActor.
 * Progress UPDATEs: one per poll that finds the job still running, which is what a naive
 * implementation does (and what the service did before its progress writes were batched): with
 * T = 15 s / SIM_SPEED and poll = clamp(T / 10, 20 ms, 5 s), that is ~9 per job at
 * SIM_SPEED=10 and 0 at SIM_SPEED=1000 (the first poll finds it done). The outbox rows are
 * written, not delivered (no delivery worker): the service delivers its own, at its cost.
 *
 * IPC: {cmd: 'pending'} -> {pending} jobs not yet completed in memory and usage rows not yet written;
 * {cmd: 'check'} -> ledger and lifecycle counts for the scenario's checks.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Fastify from 'fastify'
import postgres from 'postgres'
import { completeJob, CREATE_SCHEMA, createJob, LIFECYCLE_SCHEMA, metered, meterRequests, USAGE_SCHEMA } from './usual-create.js'

const PRICE = 10
const ESTIMATED_SECONDS = 15 // nano-banana
const sql = postgres(process.env.DATABASE_URL!, {
  max: Number(process.env.PG_POOL ?? 10), onnotice: () => {},
  types: { bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) } } as any
})
const accounts = Number(process.env.ACCOUNTS ?? 100)
const credits = Number(process.env.CREDITS ?? 100_000_000)
/** Accounts 1..WEBHOOK_ACCOUNTS have one registered webhook (job.completed) to WEBHOOK_URL. */
const webhookAccounts = Number(process.env.WEBHOOK_ACCOUNTS ?? 0)
const webhookUrl = process.env.WEBHOOK_URL ?? 'http://127.0.0.1:9/hook'
const simSpeed = Number(process.env.SIM_SPEED ?? 10)
const durationMs = Math.max(1, Math.round(ESTIMATED_SECONDS * 1000 / simSpeed))
/** The service's JobActor cadence: a tenth of the expected run time, between 20 ms and 5 s. */
const pollMs = Math.min(5000, Math.max(20, Math.round(durationMs / 10)))
const png = readFileSync(fileURLToPath(new URL('../../../assets/sim/sample.png', import.meta.url)))
const results = mkdtempSync(join(tmpdir(), 'genjobs-bench-lifecycle-'))
const base = `http://127.0.0.1:${process.env.PORT}/files/`

await sql.unsafe(LIFECYCLE_SCHEMA + USAGE_SCHEMA)
await sql.begin(async (tx) => {
  await tx`INSERT INTO bench_accounts (id, email, credits) SELECT g, 'b' || g || '@bench.example', ${credits} FROM generate_series(1, ${accounts}) g ON CONFLICT DO NOTHING`
  await tx`INSERT INTO bench_credit_entries (account_id, delta, kind) SELECT g, ${credits}, 'grant' FROM generate_series(1, ${accounts}) g
    WHERE NOT EXISTS (SELECT 1 FROM bench_credit_entries e WHERE e.account_id = g)`
  await tx`INSERT INTO bench_webhooks (account_id, url, secret, events) SELECT g, ${webhookUrl}, md5(g::text), '{job.completed,job.failed}' FROM generate_series(1, ${webhookAccounts}) g
    WHERE NOT EXISTS (SELECT 1 FROM bench_webhooks w WHERE w.account_id = g)`
})

interface Live { id: string; accountId: number; model: string; prompt: string; submittedAt: number; createdAt: Date; progress: number }
let pending = 0
let progressUpdates = 0
let tickErrors = 0

function schedule (j: Live): void {
  setTimeout(() => {
    tick(j).catch(() => { tickErrors++; schedule(j) })
  }, pollMs)
}

async function tick (j: Live): Promise<void> {
  const elapsed = Date.now() - j.submittedAt
  if (elapsed < durationMs) {
    const progress = Math.max(j.progress, Math.min(99, Math.max(1, Math.floor(elapsed / durationMs * 100))))
    await sql`UPDATE bench_jobs SET status = 'processing', progress = ${progress}, updated_at = now() WHERE id = ${j.id}`
    j.progress = progress
    progressUpdates++
    schedule(j)
    return
  }
  await complete(j)
}

async function complete (j: Live): Promise<void> {
  const file = `${j.id}.png`
  await writeFile(join(results, file), png)
  const url = base + 'results/' + file
  const at = new Date()
  await completeJob(sql, { id: j.id, accountId: j.accountId, model: j.model, prompt: j.prompt, createdAt: j.createdAt, price: PRICE }, url, 'simulated/' + j.model, at)
  pending--
}

const app = Fastify({ logger: false })
meterRequests(app, sql, PRICE)
app.post('/v1/generate/image', { schema: CREATE_SCHEMA }, async (req, reply) => {
  const accountId = Number(req.headers['x-account-id'])
  const { model, prompt } = req.body as { model: string; prompt: string }
  const created = await createJob(sql, accountId, model, prompt, PRICE, ESTIMATED_SECONDS)
  if (created === null) return reply.code(402).send({ error: true, code: 'INSUFFICIENT_CREDITS' })
  const { id, now, remaining } = created
  // "Submitted" to the simulated provider once committed; its clock starts now.
  pending++
  schedule({ id, accountId, model, prompt, submittedAt: Date.now(), createdAt: now, progress: 0 })
  return reply.code(201).send({ id, status: 'submitted', model, credits_charged: PRICE, remaining_credits: remaining, estimated_seconds: ESTIMATED_SECONDS })
})
await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT) })

process.on('message', async (m: any) => {
  if (m?.cmd === 'pending') { process.send!({ id: m.id, pending: pending + metered.inFlight, progressUpdates, tickErrors }); return }
  if (m?.cmd === 'completedBetween') {
    const [r] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM bench_jobs WHERE status = ${m.status ?? 'completed'} AND completed_at >= ${new Date(m.from)} AND completed_at < ${new Date(m.to)}`
    process.send!({ id: m.id, n: r.n })
    return
  }
  if (m?.cmd === 'check') {
    const [r] = await sql<Record<string, number>[]>`
      SELECT (SELECT count(*)::int FROM bench_accounts a WHERE a.credits <> (SELECT coalesce(sum(delta), 0) FROM bench_credit_entries e WHERE e.account_id = a.id)) AS violations,
        (SELECT count(*)::int FROM bench_jobs) AS jobs,
        (SELECT count(*)::int FROM bench_jobs WHERE status NOT IN ('completed', 'failed', 'cancelled')) AS not_terminal,
        (SELECT count(*)::int FROM bench_jobs WHERE status = 'completed') AS completed,
        (SELECT count(*)::int FROM bench_credit_entries WHERE kind = 'charge') AS charges,
        (SELECT count(*)::int FROM bench_credit_entries WHERE kind = 'refund') AS refunds,
        (SELECT count(*)::int FROM (SELECT job_id FROM bench_credit_entries WHERE kind IN ('charge', 'refund') GROUP BY job_id, kind HAVING count(*) > 1) d) AS doubled,
        (SELECT count(*)::int FROM bench_images) AS library,
        (SELECT count(*)::int FROM bench_webhook_deliveries) AS outbox,
        (SELECT count(*)::int FROM bench_jobs WHERE status = 'completed' AND account_id <= ${webhookAccounts}) AS outbox_expected,
        (SELECT count(*)::int FROM bench_request_log) AS usage_rows`
    process.send!({ id: m.id, ...r, progressUpdates, tickErrors, pending, meterErrors: metered.errors })
  }
})
process.on('SIGTERM', () => {
  app.close().then(() => sql.end({ timeout: 2 })).then(() => { rmSync(results, { recursive: true, force: true }); process.exit(0) })
})
process.send!({ type: 'ready' })
