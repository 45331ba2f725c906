/**
 * Baseline for `job-create`, `job-create-keyed` and `job-create-hot`: the conventional way to take a durable
 * charge, a Fastify 5 route doing ONE transaction per request with postgres.js:
 *   BEGIN; UPDATE accounts SET credits = credits - price WHERE id = $1 AND credits >= price;
 *   INSERT ledger entry; INSERT job; COMMIT
 * on its own tables (bench_*, same columns and indexes as the service's accounts,
 * credit_entries and jobs) in the same fresh database. Account from X-Account-Id (a cached
 * key lookup costs the service about as much). Pool: PG_POOL connections (default 10, the
 * postgres.js default).
 */
import Fastify from 'fastify'
import postgres from 'postgres'
import { CREATE_SCHEMA, createJob } from './usual-create.js'

const PRICE = 10
const sql = postgres(process.env.DATABASE_URL!, {
  max: Number(process.env.PG_POOL ?? 10), onnotice: () => {},
  types: { bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) } } as any
})
const accounts = Number(process.env.ACCOUNTS ?? 100)
const credits = Number(process.env.CREDITS ?? 100_000_000)

await sql.unsafe(`
  CREATE TABLE IF NOT EXISTS bench_accounts (
    id bigint PRIMARY KEY, email text NOT NULL, credits bigint NOT NULL DEFAULT 0 CHECK (credits >= 0),
    created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
  CREATE TABLE IF NOT EXISTS bench_credit_entries (
    id bigserial PRIMARY KEY, account_id bigint NOT NULL REFERENCES bench_accounts(id), delta bigint NOT NULL,
    kind text NOT NULL CHECK (kind IN ('grant', 'purchase', 'charge', 'refund', 'adjustment')), job_id text, note text,
    created_at timestamptz NOT NULL DEFAULT now());
  CREATE INDEX IF NOT EXISTS bench_credit_entries_account ON bench_credit_entries (account_id, id);
  CREATE INDEX IF NOT EXISTS bench_credit_entries_job ON bench_credit_entries (job_id) WHERE job_id IS NOT NULL;
  CREATE INDEX IF NOT EXISTS bench_credit_entries_account_created ON bench_credit_entries (account_id, created_at) INCLUDE (kind, delta);
  CREATE TABLE IF NOT EXISTS bench_jobs (
    id text PRIMARY KEY, account_id bigint NOT NULL REFERENCES bench_accounts(id), type text NOT NULL, model text NOT NULL,
    status text NOT NULL, prompt text, request jsonb NOT NULL, progress integer NOT NULL DEFAULT 0,
    credits_charged integer NOT NULL, estimated_seconds integer NOT NULL, provider text NOT NULL,
    idempotency_key text, deadline_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
  CREATE UNIQUE INDEX IF NOT EXISTS bench_jobs_idempotency ON bench_jobs (account_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
  CREATE INDEX IF NOT EXISTS bench_jobs_account_created ON bench_jobs (account_id, created_at DESC, id DESC);
  CREATE INDEX IF NOT EXISTS bench_jobs_active ON bench_jobs (account_id) WHERE status IN ('queued', 'submitted', 'processing');
`)
await sql.begin(async (tx) => {
  await tx`INSERT INTO bench_accounts (id, email, credits) SELECT g, 'b' || g || '@bench.example', ${credits} FROM generate_series(1, ${accounts}) g ON CONFLICT DO NOTHING`
  await tx`INSERT INTO bench_credit_entries (account_id, delta, kind) SELECT g, ${credits}, 'grant' FROM generate_series(1, ${accounts}) g
    WHERE NOT EXISTS (SELECT 1 FROM bench_credit_entries e WHERE e.account_id = g)`
})

const app = Fastify({ logger: false })
app.post('/v1/generate/image', { schema: CREATE_SCHEMA }, async (req, reply) => {
  const accountId = Number(req.headers['x-account-id'])
  const { model, prompt } = req.body as { model: string; prompt: string }
  const key = req.headers['idempotency-key']
  const created = await createJob(sql, accountId, model, prompt, PRICE, 15, typeof key === 'string' ? key : null)
  if (created === null) return reply.code(402).send({ error: true, code: 'INSUFFICIENT_CREDITS' })
  const { id, remaining } = created
  if (created.replayed) return reply.code(200).send({ id, status: 'submitted', model, credits_charged: PRICE, remaining_credits: remaining, estimated_seconds: 15, replayed: true })
  return reply.code(201).send({ id, status: 'submitted', model, credits_charged: PRICE, remaining_credits: remaining, estimated_seconds: 15 })
})
await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT) })

process.on('message', async (m: any) => {
  if (m?.cmd === 'invariant') {
    const [r] = await sql<{ violations: number; jobs: number; charges: number }[]>`
      SELECT (SELECT count(*)::int FROM bench_accounts a WHERE a.credits <> (SELECT coalesce(sum(delta), 0) FROM bench_credit_entries e WHERE e.account_id = a.id)) AS violations,
        (SELECT count(*)::int FROM bench_jobs) AS jobs,
        (SELECT count(*)::int FROM bench_credit_entries WHERE kind = 'charge') AS charges`
    process.send!({ id: m.id, ...r })
  }
})
process.on('SIGTERM', () => { app.close().then(() => sql.end({ timeout: 2 })).then(() => process.exit(0)) })
process.send!({ type: 'ready' })
