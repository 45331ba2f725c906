/**
 * The "usual way" job creation both Fastify baselines share (job-create, job-lifecycle): the
 * route's schema, and ONE transaction charging with a conditional UPDATE, then the ledger
 * entry and the job row, on the bench_* tables. Kept in one place so the two baselines measure
 * the same creation. Also the usual way to meter every request (the service writes one usage
 * row per request too, docs/api.md "Usage and limits"): an INSERT of one row into
 * bench_request_log per request once it is answered, indexed for a per-account usage summary
 * (USAGE_SCHEMA, meterRequests).
 */
import { randomBytes } from 'node:crypto'
import type postgres from 'postgres'
import type { FastifyInstance } from 'fastify'

export const CREATE_SCHEMA = {
  body: {
    type: 'object',
    required: ['model', 'prompt'],
    additionalProperties: false,
    properties: { model: { type: 'string', maxLength: 64 }, prompt: { type: 'string', minLength: 1, maxLength: 2000 } },
  },
  headers: { type: 'object', required: ['x-account-id'], properties: { 'x-account-id': { type: 'integer', minimum: 1 }, 'idempotency-key': { type: 'string', pattern: '^[A-Za-z0-9_.-]{1,200}$' } } },
} as const

export interface Created { id: string; now: Date; remaining: number; replayed?: boolean }

/**
 * Charges `price` and inserts the job in one transaction; null when the balance is short.
 * With an Idempotency-Key (job-create-keyed), the usual way: the same transaction first looks
 * the key up (a job it names is answered again, uncharged), and the job row carries the key
 * under the unique (account_id, idempotency_key) index.
 */
export async function createJob (
  sql: postgres.Sql, accountId: number, model: string, prompt: string, price: number, estimatedSeconds: number, idempotencyKey: string | null = null,
): Promise<Created | null> {
  let id = 'job_' + randomBytes(12).toString('base64url')
  const now = new Date()
  let replayed = false
  const remaining = await sql.begin(async (tx) => {
    if (idempotencyKey !== null) {
      const [seen] = await tx<{ id: string }[]>`SELECT id FROM bench_jobs WHERE account_id = ${accountId} AND idempotency_key = ${idempotencyKey}`
      if (seen) {
        id = seen.id
        replayed = true
        const [b] = await tx<{ credits: number }[]>`SELECT credits FROM bench_accounts WHERE id = ${accountId}`
        return b.credits
      }
    }
    const [a] = await tx<{ credits: number }[]>`UPDATE bench_accounts SET credits = credits - ${price}, updated_at = now() WHERE id = ${accountId} AND credits >= ${price} RETURNING credits`
    if (!a) return null
    await tx`INSERT INTO bench_credit_entries (account_id, delta, kind, job_id, note) VALUES (${accountId}, ${-price}, 'charge', ${id}, ${'image ' + model})`
    await tx`INSERT INTO bench_jobs (id, account_id, type, model, status, prompt, request, credits_charged, estimated_seconds, provider, idempotency_key, deadline_at, created_at, updated_at)
      VALUES (${id}, ${accountId}, 'image', ${model}, 'submitted', ${prompt}, ${tx.json({ model, prompt } as any)}, ${price}, ${estimatedSeconds}, 'simulated', ${idempotencyKey}, ${new Date(now.getTime() + 600_000)}, ${now}, ${now})`
    return a.credits
  })
  return remaining === null ? null : { id, now, remaining, replayed }
}

/** A job as the usual way's completion needs it. */
export interface Completing { id: string; accountId: number; model: string; prompt: string | null; createdAt: Date; price: number }

/**
 * Completes a job the usual way, in ONE transaction: the conditional status UPDATE, an outbox
 * row per subscribed webhook, the library image (`modelId`: the provider's model id). Shared by
 * the job-lifecycle and provider-lifecycle baselines.
 */
export async function completeJob (sql: postgres.Sql, j: Completing, url: string, modelId: string, at: Date): Promise<void> {
  await sql.begin(async (tx) => {
    const [row] = await tx`UPDATE bench_jobs SET status = 'completed', progress = 100, result_url = ${url}, updated_at = ${at}, completed_at = ${at}
      WHERE id = ${j.id} AND status IN ('queued', 'submitted', 'processing') RETURNING id`
    if (!row) return
    const hooks = await tx<{ id: number; url: string; secret: string }[]>`
      SELECT id, url, secret FROM bench_webhooks WHERE account_id = ${j.accountId} AND active AND deleted_at IS NULL AND 'job.completed' = ANY(events)`
    if (hooks.length) {
      const eventId = 'evt_' + randomBytes(12).toString('base64url')
      const job = { id: j.id, status: 'completed', model: j.model, progress: 100, result_url: url, credits_charged: j.price, created_at: j.createdAt.toISOString(), completed_at: at.toISOString() }
      const body = JSON.stringify({ id: eventId, type: 'job.completed', created_at: at.toISOString(), data: { job } })
      const rows = hooks.map(h => ({ id: 'dlv_' + randomBytes(12).toString('base64url'), event_id: eventId, account_id: j.accountId, webhook_id: h.id, job_id: j.id, event: 'job.completed', url: h.url, secret: h.secret, body }))
      await tx`INSERT INTO bench_webhook_deliveries ${tx(rows as any, 'id', 'event_id', 'account_id', 'webhook_id', 'job_id', 'event', 'url', 'secret', 'body')}`
    }
    await tx`INSERT INTO bench_images (account_id, job_id, prompt, model, model_id, image_url, created_at, completed_at)
      VALUES (${j.accountId}, ${j.id}, ${j.prompt}, ${modelId}, ${j.model}, ${url}, ${j.createdAt}, ${at})`
  })
}

/**
 * The request log the usual way: one row per request with a serial key, and the (account, time)
 * index a per-account usage summary reads it by (the service's own request_log started so).
 */
/**
 * The usual way's tables for a job's whole life (accounts, ledger, jobs, library images,
 * webhooks and their outbox) with the indexes the API's listings need: shared by the
 * job-lifecycle and provider-lifecycle baselines.
 */
export const LIFECYCLE_SCHEMA = `
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
    credits_charged integer NOT NULL, credits_refunded integer NOT NULL DEFAULT 0, estimated_seconds integer NOT NULL,
    result_url text, provider text NOT NULL, idempotency_key text, deadline_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), completed_at timestamptz);
  CREATE UNIQUE INDEX IF NOT EXISTS bench_jobs_idempotency ON bench_jobs (account_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
  CREATE INDEX IF NOT EXISTS bench_jobs_account_created ON bench_jobs (account_id, created_at DESC, id DESC);
  CREATE INDEX IF NOT EXISTS bench_jobs_active ON bench_jobs (account_id) WHERE status IN ('queued', 'submitted', 'processing');
  CREATE TABLE IF NOT EXISTS bench_images (
    id bigserial PRIMARY KEY, account_id bigint NOT NULL REFERENCES bench_accounts(id), job_id text UNIQUE REFERENCES bench_jobs(id),
    prompt text, model text, model_id text, image_url text NOT NULL, is_favorite boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(), completed_at timestamptz);
  CREATE INDEX IF NOT EXISTS bench_images_account ON bench_images (account_id, created_at DESC, id DESC);
  CREATE TABLE IF NOT EXISTS bench_webhooks (
    id bigserial PRIMARY KEY, account_id bigint NOT NULL REFERENCES bench_accounts(id), url text NOT NULL, secret text NOT NULL,
    events text[] NOT NULL, active boolean NOT NULL DEFAULT true, created_at timestamptz NOT NULL DEFAULT now(), deleted_at timestamptz);
  CREATE INDEX IF NOT EXISTS bench_webhooks_account ON bench_webhooks (account_id) WHERE deleted_at IS NULL;
  CREATE TABLE IF NOT EXISTS bench_webhook_deliveries (
    id text PRIMARY KEY, event_id text NOT NULL, account_id bigint NOT NULL REFERENCES bench_accounts(id),
    webhook_id bigint REFERENCES bench_webhooks(id), job_id text NOT NULL REFERENCES bench_jobs(id), event text NOT NULL,
    url text NOT NULL, secret text NOT NULL, body text NOT NULL, status text NOT NULL DEFAULT 'pending',
    attempts integer NOT NULL DEFAULT 0, next_attempt_at timestamptz NOT NULL DEFAULT now(), created_at timestamptz NOT NULL DEFAULT now());
  CREATE INDEX IF NOT EXISTS bench_webhook_deliveries_due ON bench_webhook_deliveries (next_attempt_at) WHERE status = 'pending';
`

export const USAGE_SCHEMA = `
  CREATE TABLE IF NOT EXISTS bench_request_log (
    id bigserial PRIMARY KEY, at timestamptz NOT NULL, account_id bigint, key_id bigint, method text NOT NULL, endpoint text NOT NULL,
    status integer NOT NULL, credits integer NOT NULL DEFAULT 0, latency_ms real NOT NULL, request_id text);
  CREATE INDEX IF NOT EXISTS bench_request_log_account ON bench_request_log (account_id, at) WHERE account_id IS NOT NULL;
`

/** Counts of meterRequests' writes, and those not yet answered (the baseline reports them to the scenario; a round drains them). */
export const metered = { rows: 0, errors: 0, inFlight: 0 }

/**
 * One usage row per request, written once its answer is sent or its client went away (the
 * raw response's `close`: Fastify's onResponse does not run for a request whose client
 * closed first, as the load generator's connections do at the end of a run, and the service
 * meters those too): an autocommit INSERT, account from X-Account-Id, credits `price` on a 201.
 */
export function meterRequests (app: FastifyInstance, sql: postgres.Sql, price: number): void {
  app.addHook('onRequest', async (req, reply) => {
    const started = performance.now()
    reply.raw.once('close', () => {
      const account = Number(req.headers['x-account-id'])
      const status = reply.statusCode
      metered.inFlight++
      sql`INSERT INTO bench_request_log (at, account_id, key_id, method, endpoint, status, credits, latency_ms, request_id)
        VALUES (${new Date()}, ${Number.isInteger(account) && account > 0 ? account : null}, ${null}, ${req.method}, ${req.routeOptions.url ?? req.url},
          ${status}, ${status === 201 ? price : 0}, ${performance.now() - started}, ${req.id})`
        .then(() => { metered.rows++ }, () => { metered.errors++ }).finally(() => { metered.inFlight-- })
    })
  })
}
