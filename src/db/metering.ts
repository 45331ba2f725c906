import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { Sql } from './connect.js'

/** One metered request (SPEC.md 1.5: endpoint, status, credits, latency). */
export interface MeterRow {
  at: Date
  account_id: number | null
  key_id: number | null
  method: string
  endpoint: string
  status: number
  credits: number
  latency_ms: number
  request_id: string
}

/** Rows per INSERT statement: 5000 x 7 columns stays under PostgreSQL's 65535 parameters. */
const ROWS_PER_INSERT = 5000

/** COPY text format: backslash, tab, newline and carriage return are escaped; `\N` is NULL. */
function copyText (v: string | null): string {
  if (v === null) return '\\N'
  return /[\\\t\n\r]/.test(v) ? v.replace(/[\\\t\n\r]/g, c => c === '\\' ? '\\\\' : c === '\t' ? '\\t' : c === '\n' ? '\\n' : '\\r') : v
}

type Rollup = Map<string, { account_id: number; day: string; endpoint: string; requests: number; errors: number; credits: number; latency_ms_sum: number }>

/**
 * One pass over the rows: COPY text in chunks of about 64 KB (~600 rows) for request_log, and
 * the per-account daily rollup. A busy second buffers tens of thousands of rows; the event
 * loop gets a turn between chunks so serving requests is never held up for the whole batch.
 */
async function* copyChunks (rows: MeterRow[], roll: Rollup): AsyncGenerator<string> {
  let s = ''
  for (const r of rows) {
    const at = r.at.toISOString()
    s += `${at}\t${r.account_id ?? '\\N'}\t${r.key_id ?? '\\N'}\t${copyText(r.method)}\t${copyText(r.endpoint)}\t${r.status}\t${r.credits}\t${r.latency_ms}\t${copyText(r.request_id)}\n`
    if (r.account_id !== null) {
      const day = at.slice(0, 10)
      const endpoint = `${r.method} ${r.endpoint}`
      const k = `${r.account_id}|${day}|${endpoint}`
      let g = roll.get(k)
      if (!g) { g = { account_id: r.account_id, day, endpoint, requests: 0, errors: 0, credits: 0, latency_ms_sum: 0 }; roll.set(k, g) }
      g.requests++
      if (r.status >= 400) g.errors++
      g.credits += r.credits
      g.latency_ms_sum += r.latency_ms
    }
    if (s.length >= 65536) {
      yield s
      s = ''
      await new Promise<void>(resolve => setImmediate(resolve))
    }
  }
  if (s) yield s
}

/**
 * Writes a batch of raw rows and folds them into the per-account daily rollup in one
 * transaction, so summaries read usage_daily and never scan raw rows.
 */
export async function writeMeterBatch (sql: Sql, rows: MeterRow[]): Promise<void> {
  if (rows.length === 0) return
  const roll: Rollup = new Map()
  await sql.begin(async (tx) => {
    // Every request is a row (SPEC.md 1.5), thousands per second under load: COPY costs a
    // fraction of a multi-row INSERT on both sides (no per-parameter Bind encoding and parsing)
    // and has no parameter limit.
    const copy = await tx`COPY request_log (at, account_id, key_id, method, endpoint, status, credits, latency_ms, request_id) FROM STDIN`.writable()
    await pipeline(Readable.from(copyChunks(rows, roll)), copy)
    const groups = [...roll.values()]
    for (let i = 0; i < groups.length; i += ROWS_PER_INSERT) {
      const g = groups.slice(i, i + ROWS_PER_INSERT)
      await tx`
        INSERT INTO usage_daily ${tx(g as any, 'account_id', 'day', 'endpoint', 'requests', 'errors', 'credits', 'latency_ms_sum')}
        ON CONFLICT (account_id, day, endpoint) DO UPDATE SET
          requests = usage_daily.requests + excluded.requests,
          errors = usage_daily.errors + excluded.errors,
          credits = usage_daily.credits + excluded.credits,
          latency_ms_sum = usage_daily.latency_ms_sum + excluded.latency_ms_sum`
    }
  })
}

export async function pruneMetering (sql: Sql, retentionDays: number): Promise<number> {
  const r = await sql`DELETE FROM request_log WHERE at < now() - make_interval(days => ${retentionDays})`
  return r.count
}
