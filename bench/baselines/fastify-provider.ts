/**
 * Baseline for `provider-lifecycle`: the provider path written the usual way, Fastify 5 +
 * postgres.js (pool PG_POOL, default 10) + undici, on its own bench_* tables (the columns and
 * indexes of bench/baselines/fastify-lifecycle.ts) in the scenario's database, against the same
 * fal contract stub as the service:
 *   create:   BEGIN; UPDATE accounts ... WHERE credits >= price; INSERT ledger; INSERT job; COMMIT;
 *             then POST {FAL_URL}/fal-ai/nano-banana?fal_webhook=<our callback URL, ?job=<id>>
 *             (a refused submission: BEGIN; job failed; refund entry; COMMIT)
 *   callback: POST /fal/callback?job=<id>: the raw body kept; the Ed25519 signature checked
 *             (fal's message: request id, user id, timestamp, sha256 of the body; keys from the
 *             stub's JWKS, fetched once and cached); SELECT the job; the result streamed from its
 *             URL into a file (undici, pipeline); BEGIN; UPDATE the job completed; SELECT the
 *             account's webhooks; INSERT one outbox row per webhook; INSERT the library row; COMMIT
 * The outbox rows are written, not delivered (no delivery worker), as in fastify-lifecycle.
 */
import { createHash, createPublicKey, randomBytes, verify, type KeyObject } from 'node:crypto'
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import Fastify from 'fastify'
import postgres from 'postgres'
import { request } from 'undici'
import { completeJob, CREATE_SCHEMA, LIFECYCLE_SCHEMA } from './usual-create.js'

const PRICE = 10
const ESTIMATED_SECONDS = 15 // nano-banana
const FAL_APP = 'fal-ai/nano-banana'
const sql = postgres(process.env.DATABASE_URL!, {
  max: Number(process.env.PG_POOL ?? 10), onnotice: () => {},
  types: { bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) } } as any
})
const accounts = Number(process.env.ACCOUNTS ?? 10)
const credits = Number(process.env.CREDITS ?? 100_000_000)
const webhookAccounts = Number(process.env.WEBHOOK_ACCOUNTS ?? 0)
const webhookUrl = process.env.WEBHOOK_URL ?? 'http://127.0.0.1:9/hook'
const falUrl = process.env.FAL_URL!
const falKey = process.env.FAL_KEY!
const jwksUrl = process.env.FAL_JWKS_URL!
const port = Number(process.env.PORT)
// The runner's data directory (removed when the run ends, bench/lib/children.ts), else its own.
const results = process.env.BENCH_DATA_DIR ?? mkdtempSync(join(tmpdir(), 'genjobs-bench-provider-'))
const base = `http://127.0.0.1:${port}/files/`

await sql.unsafe(LIFECYCLE_SCHEMA)
await sql.begin(async (tx) => {
  await tx`INSERT INTO bench_accounts (id, email, credits) SELECT g, 'b' || g || '@bench.example', ${credits} FROM generate_series(1, ${accounts}) g ON CONFLICT DO NOTHING`
  await tx`INSERT INTO bench_credit_entries (account_id, delta, kind) SELECT g, ${credits}, 'grant' FROM generate_series(1, ${accounts}) g
    WHERE NOT EXISTS (SELECT 1 FROM bench_credit_entries e WHERE e.account_id = g)`
  await tx`INSERT INTO bench_webhooks (account_id, url, secret, events) SELECT g, ${webhookUrl}, md5(g::text), '{job.completed,job.failed}' FROM generate_series(1, ${webhookAccounts}) g
    WHERE NOT EXISTS (SELECT 1 FROM bench_webhooks w WHERE w.account_id = g)`
})

let callbacks = 0
let refused = 0
let failures = 0

/** fal's JWKS, fetched once (refetched when a signature matches no cached key). */
let keys: KeyObject[] | null = null
async function jwks (refresh = false): Promise<KeyObject[]> {
  if (keys && !refresh) return keys
  const r = await request(jwksUrl)
  const body = await r.body.json() as { keys: Array<{ x: string }> }
  keys = body.keys.map(k => createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: k.x }, format: 'jwk' }))
  return keys
}

async function verified (headers: Record<string, string | string[] | undefined>, body: Buffer): Promise<boolean> {
  const id = headers['x-fal-webhook-request-id']
  const user = headers['x-fal-webhook-user-id']
  const ts = headers['x-fal-webhook-timestamp']
  const sig = headers['x-fal-webhook-signature']
  if (typeof id !== 'string' || typeof user !== 'string' || typeof ts !== 'string' || typeof sig !== 'string') return false
  if (Math.abs(Date.now() / 1000 - Number(ts)) > 300) return false
  const msg = Buffer.from(`${id}\n${user}\n${ts}\n${createHash('sha256').update(body).digest('hex')}`)
  const signature = Buffer.from(sig, 'hex')
  for (const refresh of [false, true]) {
    if ((await jwks(refresh)).some(k => verify(null, msg, k, signature))) return true
  }
  return false
}

async function fail (id: string, accountId: number): Promise<void> {
  await sql.begin(async (tx) => {
    const [row] = await tx`UPDATE bench_jobs SET status = 'failed', credits_refunded = credits_charged, updated_at = now(), completed_at = now()
      WHERE id = ${id} AND status IN ('queued', 'submitted', 'processing') RETURNING credits_charged`
    if (!row) return
    await tx`UPDATE bench_accounts SET credits = credits + ${row.credits_charged}, updated_at = now() WHERE id = ${accountId}`
    await tx`INSERT INTO bench_credit_entries (account_id, delta, kind, job_id, note) VALUES (${accountId}, ${row.credits_charged}, 'refund', ${id}, 'provider failure')`
  })
}

interface JobRow { id: string; account_id: number; status: string; model: string; prompt: string; created_at: Date }

async function complete (j: JobRow, resultUrl: string): Promise<void> {
  const file = `${j.id}.png`
  const res = await request(resultUrl)
  if (res.statusCode !== 200) { await res.body.dump(); throw new Error(`result download answered ${res.statusCode}`) }
  await pipeline(res.body, createWriteStream(join(results, file)))
  const url = base + 'results/' + file
  const at = new Date()
  await completeJob(sql, { id: j.id, accountId: j.account_id, model: j.model, prompt: j.prompt, createdAt: j.created_at, price: PRICE }, url, 'fal/' + FAL_APP, at)
}

const app = Fastify({ logger: false })
app.post('/v1/generate/image', { schema: CREATE_SCHEMA }, async (req, reply) => {
  const accountId = Number(req.headers['x-account-id'])
  const { model, prompt } = req.body as { model: string; prompt: string }
  const id = 'job_' + randomBytes(12).toString('base64url')
  const now = new Date()
  const remaining = await sql.begin(async (tx) => {
    const [a] = await tx<{ credits: number }[]>`UPDATE bench_accounts SET credits = credits - ${PRICE}, updated_at = now() WHERE id = ${accountId} AND credits >= ${PRICE} RETURNING credits`
    if (!a) return null
    await tx`INSERT INTO bench_credit_entries (account_id, delta, kind, job_id, note) VALUES (${accountId}, ${-PRICE}, 'charge', ${id}, ${'image ' + model})`
    await tx`INSERT INTO bench_jobs (id, account_id, type, model, status, prompt, request, credits_charged, estimated_seconds, provider, deadline_at, created_at, updated_at)
      VALUES (${id}, ${accountId}, 'image', ${model}, 'submitted', ${prompt}, ${tx.json({ model, prompt } as any)}, ${PRICE}, ${ESTIMATED_SECONDS}, 'fal', ${new Date(now.getTime() + 1_800_000)}, ${now}, ${now})`
    return a.credits
  })
  if (remaining === null) return reply.code(402).send({ error: true, code: 'INSUFFICIENT_CREDITS' })
  const hook = `http://127.0.0.1:${port}/fal/callback?job=${encodeURIComponent(id)}`
  const res = await request(`${falUrl}/${FAL_APP}?fal_webhook=${encodeURIComponent(hook)}`, {
    method: 'POST', headers: { authorization: `Key ${falKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ prompt }),
  }).catch(() => null)
  if (!res || res.statusCode !== 200) {
    await res?.body.dump()
    await fail(id, accountId)
    return reply.code(502).send({ error: true, code: 'PROVIDER_ERROR' })
  }
  await res.body.json()
  return reply.code(201).send({ id, status: 'submitted', model, credits_charged: PRICE, remaining_credits: remaining, estimated_seconds: ESTIMATED_SECONDS })
})

await app.register(async (scope) => {
  // The signature covers the raw bytes: this scope reads JSON bodies as a Buffer.
  scope.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit: 256 * 1024 }, (_req, body, done) => { done(null, body) })
  scope.post('/fal/callback', async (req, reply) => {
    callbacks++
    const raw = req.body as Buffer
    if (!await verified(req.headers, raw)) { refused++; return reply.code(401).send({ error: true, code: 'CALLBACK_UNVERIFIED' }) }
    const msg = JSON.parse(raw.toString('utf8')) as { status: string; payload?: { images?: Array<{ url: string }> } }
    const jobId = (req.query as { job?: string }).job ?? ''
    const [j] = await sql<JobRow[]>`SELECT id, account_id, status, model, prompt, created_at FROM bench_jobs WHERE id = ${jobId}`
    if (!j || !['queued', 'submitted', 'processing'].includes(j.status)) return { received: true }
    const url = msg.payload?.images?.[0]?.url
    try {
      if (msg.status === 'OK' && url) await complete(j, url)
      else await fail(j.id, j.account_id)
    } catch {
      failures++
      return reply.code(500).send({ error: true, code: 'INTERNAL_ERROR' })
    }
    return { received: true }
  })
})
await app.listen({ host: '127.0.0.1', port })

process.on('message', (m: any) => {
  if (m?.cmd === 'stats') process.send!({ id: m.id, callbacks, refused, failures })
})
process.on('SIGTERM', () => {
  app.close().then(() => sql.end({ timeout: 2 })).then(() => {
    if (process.env.BENCH_DATA_DIR === undefined) rmSync(results, { recursive: true, force: true })
    process.exit(0)
  })
})
process.send!({ type: 'ready' })
