import type { Q } from './connect.js'

export interface AssetRow { id: number; account_id: number; kind: 'character' | 'voice'; name: string; created_at: Date }

export async function insertAsset (sql: Q, accountId: number, kind: 'character' | 'voice', name: string): Promise<AssetRow> {
  const [row] = await sql<AssetRow[]>`INSERT INTO assets (account_id, kind, name) VALUES (${accountId}, ${kind}, ${name}) RETURNING *`
  return row
}

export async function accountExists (sql: Q, id: number): Promise<boolean> {
  const r = await sql`SELECT 1 FROM accounts WHERE id = ${id}`
  return r.length > 0
}
