import type { Q } from './connect.js'
import type { AssetRow } from './admin.js'

/**
 * One page of an account's characters and voices (GET /v1/assets, docs/api.md "Jobs"), newest first,
 * with the total for the list envelope. Operators create assets (POST /v1/admin/accounts/:id/assets).
 */
export async function listAssets (sql: Q, accountId: number, o: { kind?: 'character' | 'voice'; limit: number; offset: number }): Promise<{ rows: AssetRow[]; total: number }> {
  const kind = o.kind ? sql`AND kind = ${o.kind}` : sql``
  const [rows, [c]] = await Promise.all([
    sql<AssetRow[]>`
      SELECT id, account_id, kind, name, created_at FROM assets
      WHERE account_id = ${accountId} ${kind}
      ORDER BY created_at DESC, id DESC LIMIT ${o.limit} OFFSET ${o.offset}`,
    sql<{ n: number }[]>`SELECT count(*)::int AS n FROM assets WHERE account_id = ${accountId} ${kind}`,
  ])
  return { rows, total: c.n }
}

/** Which of `ids` are the account's assets of `kind` (gemini-omni character and voice ids). */
export async function ownedAssetIds (sql: Q, accountId: number, kind: 'character' | 'voice', ids: number[]): Promise<Set<number>> {
  const rows = await sql<{ id: number }[]>`SELECT id FROM assets WHERE account_id = ${accountId} AND kind = ${kind} AND id = ANY(${ids}::bigint[])`
  return new Set(rows.map(r => r.id))
}
