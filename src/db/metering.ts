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

/** Rows per INSERT statement: 5000 x 9 columns stays under PostgreSQL's 65535 parameters. */
const ROWS_PER_INSERT = 5000

/**
 * Writes a batch of raw rows and folds them into the per-account daily rollup in one
 * transaction, so summaries read usage_daily and never scan raw rows.
 */
export async function writeMeterBatch (sql: Sql, rows: MeterRow[]): Promise<void> {
  if (rows.length === 0) return
  const roll = new Map<string, { account_id: number; day: string; endpoint: string; requests: number; errors: number; credits: number; latency_ms_sum: number }>()
  for (const r of rows) {
    if (r.account_id === null) continue
    const day = r.at.toISOString().slice(0, 10)
    const endpoint = `${r.method} ${r.endpoint}`
    const k = `${r.account_id}|${day}|${endpoint}`
    let g = roll.get(k)
    if (!g) { g = { account_id: r.account_id, day, endpoint, requests: 0, errors: 0, credits: 0, latency_ms_sum: 0 }; roll.set(k, g) }
    g.requests++
    if (r.status >= 400) g.errors++
    g.credits += r.credits
    g.latency_ms_sum += r.latency_ms
  }
  await sql.begin(async (tx) => {
    // A statement carries at most 65534 parameters: under load a flush holds more rows than
    // one INSERT can (9 columns), so they go in chunks of the same transaction.
    for (let i = 0; i < rows.length; i += ROWS_PER_INSERT) {
      const chunk = rows.slice(i, i + ROWS_PER_INSERT)
      await tx`INSERT INTO request_log ${tx(chunk as any, 'at', 'account_id', 'key_id', 'method', 'endpoint', 'status', 'credits', 'latency_ms', 'request_id')}`
    }
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
