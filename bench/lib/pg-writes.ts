/**
 * PostgreSQL CPU per job of the service's own write statements, on two schemas in alternation:
 * the migrations up to BEFORE (default 0016) against all of them. No service, no HTTP: one
 * connection replays what the group commit and the metering flush send for a job lifecycle
 * (writeBatch: a batch of creations with the completions of an earlier batch; with
 * `progress`, also the transition to processing of the previous batch and a progress flush of
 * the one before; a metering flush of one usage row per creation every 1000 rows), and the
 * figure is the backend's utime+stime (/proc) over the jobs. It isolates what a schema
 * change does to PostgreSQL's work from the noise of a shared machine's scheduling, which the
 * job-lifecycle scenario's CPU figures carry. docs/decisions.md "PostgreSQL CPU per job".
 *
 *   node dist/bench/lib/pg-writes.js [fast|progress] [jobs=3000] [batch=50] [rounds=3]
 *   (DATABASE_URL: the server to create scratch databases on; BEFORE: last migration of the old schema)
 */
import { copyFileSync, mkdtempSync, readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import postgres from 'postgres'
import { connect, type Sql } from '../../src/db/connect.js'
import { migrate } from '../../src/db/migrate.js'
import { writeBatch, type BatchWrite } from '../../src/db/ledger.js'
import { saveProgress, type NewJob } from '../../src/db/jobs.js'
import { MeterColumns, writeMeterBatch } from '../../src/db/metering.js'
import type { JobRow } from '../../src/jobs/view.js'
import { cpuUs } from './proc.js'

const ADMIN = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres'
const SQL_DIR = fileURLToPath(new URL('../../../sql/', import.meta.url))
const mode = process.argv[2] === 'progress' ? 'progress' : 'fast'
const jobs = Number(process.argv[3] ?? 3000)
const batch = Number(process.argv[4] ?? 50)
const rounds = Number(process.argv[5] ?? 3)
const before = process.env.BEFORE ?? '0016'

/** A directory with the migrations up to `last` (inclusive). */
function migrationsUpTo (last: string): string {
  const d = mkdtempSync(join(tmpdir(), 'genjobs-pg-writes-'))
  for (const f of readdirSync(SQL_DIR)) if (/^\d{4}_.+\.sql$/.test(f) && f.slice(0, 4) <= last) copyFileSync(join(SQL_DIR, f), join(d, f))
  return d
}
const schemas = { before: migrationsUpTo(before), after: migrationsUpTo('9999') }

const PROMPT = 'a lighthouse at dawn, oil painting (bench lifecycle)'

function job (accountId: number): NewJob & JobRow {
  const now = new Date()
  return {
    id: 'job_' + randomBytes(12).toString('base64url'), account_id: accountId, key_id: null, type: 'image', model: 'nano-banana', status: 'submitted',
    prompt: PROMPT, request: { model: 'nano-banana', prompt: PROMPT }, progress: 0, credits_charged: 10, credits_refunded: 0, estimated_seconds: 15,
    result_url: null, error_message: null, content_policy_violation: false, provider: 'simulated', provider_job_id: 'sim_' + randomBytes(12).toString('base64url'),
    idempotency_key: null, request_hash: null, source_job_id: null, free_trial: false, deadline_at: new Date(now.getTime() + 600_000), created_at: now,
    updated_at: now, completed_at: null, owner: 'node-a', lease_until: new Date(now.getTime() + 30_000),
  } as NewJob & JobRow
}

async function seed (sql: Sql): Promise<number[]> {
  const ids: number[] = []
  for (let i = 0; i < 100; i++) {
    const [{ id }] = await sql<{ id: number }[]>`INSERT INTO accounts (email, password_hash, credits, has_purchased)
      VALUES (${`pgw${i}@bench.example`}, 'x', 1000000000, true) RETURNING id`
    await sql`INSERT INTO credit_entries (account_id, delta, kind) VALUES (${id}, 1000000000, 'grant')`
    // Half the accounts have a job.completed webhook, as in job-lifecycle.
    if (i < 50) await sql`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${id}, 'http://127.0.0.1:9/hook', 's', ${['job.completed', 'job.failed']})`
    ids.push(Number(id))
  }
  return ids
}

/** One lifecycle replay on a scratch database with `schema`: PostgreSQL µs per job. */
async function replay (schema: keyof typeof schemas): Promise<number> {
  const name = `genjobs_pgw_${randomBytes(4).toString('hex')}`
  const admin = postgres(ADMIN, { max: 1, onnotice: () => {} })
  await admin.unsafe(`CREATE DATABASE ${name}`)
  const u = new URL(ADMIN)
  u.pathname = `/${name}`
  const sql = connect(u.toString(), { max: 1 })
  try {
    await migrate(sql, schemas[schema])
    const accounts = await seed(sql)
    const [{ pid }] = await sql<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`
    const meter = new MeterColumns(4096)
    const ep = meter.endpoints.id('POST', '/v1/generate/image')
    const lag = mode === 'fast' ? 1 : 3
    const batches: Array<Array<NewJob & JobRow>> = []
    let n = 0
    const c0 = cpuUs(pid)
    for (let b = 0; n < jobs; b++) {
      const rows: Array<NewJob & JobRow> = []
      for (let i = 0; i < batch; i++) rows.push(job(accounts[n++ % accounts.length]))
      batches.push(rows)
      const at = new Date()
      const w: BatchWrite = { creations: rows, records: rows.map(() => null), completions: [], transitions: [] }
      const done = batches[b - lag]
      if (done) w.completions = done.map(r => ({ row: r, resultUrl: `http://127.0.0.1/files/results/${r.id}.png`, at }))
      if (mode === 'progress') {
        if (b >= 1) w.transitions = batches[b - 1].map(r => ({ id: r.id, status: 'processing', progress: 5, at }))
        if (b >= 2) await saveProgress(sql, batches[b - 2].map(r => ({ id: r.id, progress: 50, updated_at: at })))
      }
      await writeBatch(sql, w)
      for (const r of rows) meter.push(Date.now(), r.account_id, NaN, ep, null, null, 201, 10, 1.5, n, null)
      if (meter.length >= 1000) { await writeMeterBatch(sql, meter); meter.reset() }
    }
    const at = new Date()
    for (let k = Math.min(lag, batches.length); k >= 1; k--) {
      const done = batches[batches.length - k]
      await writeBatch(sql, { creations: [], records: [], completions: done.map(r => ({ row: r, resultUrl: `http://127.0.0.1/files/results/${r.id}.png`, at })), transitions: [] })
    }
    if (meter.length > 0) await writeMeterBatch(sql, meter)
    return (cpuUs(pid) - c0) / n
  } finally {
    await sql.end({ timeout: 2 })
    await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {})
    await admin.end()
  }
}

const got: Record<'before' | 'after', number[]> = { before: [], after: [] }
for (let r = 0; r < rounds; r++) {
  for (const s of (r % 2 === 0 ? ['before', 'after'] : ['after', 'before']) as Array<'before' | 'after'>) {
    const us = await replay(s)
    got[s].push(us)
    process.stdout.write(`${mode} round ${r + 1} ${s === 'before' ? `migrations <= ${before}` : 'all migrations'}: ${us.toFixed(0)} µs of PostgreSQL CPU per job\n`)
  }
}
const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]
const b = median(got.before)
const a = median(got.after)
process.stdout.write(`${mode}: median ${b.toFixed(0)} -> ${a.toFixed(0)} µs per job (${(a / b).toFixed(2)}x) over ${rounds} rounds of ${jobs} jobs in batches of ${batch}\n`)
