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
    await tx`INSERT INTO request_log ${tx(rows as any, 'at', 'account_id', 'key_id', 'method', 'endpoint', 'status', 'credits', 'latency_ms', 'request_id')}`
    if (roll.size > 0) {
      const g = [...roll.values()]
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
