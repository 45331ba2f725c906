import type { Q } from './connect.js'

export interface LedgerRow { id: number; kind: string; delta: number; job_id: string | null; note: string | null; created_at: Date }

/** One account's credit entries, newest first (GET /v1/credits/ledger). */
export async function listLedger (sql: Q, accountId: number, o: { kind?: string; jobId?: string; limit: number; offset: number }): Promise<{ rows: LedgerRow[]; total: number }> {
  const kind = o.kind ?? null
  const jobId = o.jobId ?? null
  const [rows, [c]] = await Promise.all([
    sql<LedgerRow[]>`
      SELECT id, kind, delta, job_id, note, created_at FROM credit_entries
      WHERE account_id = ${accountId} AND (${kind}::text IS NULL OR kind = ${kind}) AND (${jobId}::text IS NULL OR job_id = ${jobId})
      ORDER BY id DESC LIMIT ${o.limit} OFFSET ${o.offset}`,
    sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM credit_entries
      WHERE account_id = ${accountId} AND (${kind}::text IS NULL OR kind = ${kind}) AND (${jobId}::text IS NULL OR job_id = ${jobId})`,
  ])
  return { rows, total: c.n }
}
