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

export interface AccountListRow {
  id: number; email: string; credits: number; email_verified: boolean; banned: boolean; credits_locked: boolean
  has_purchased: boolean; enterprise: boolean; created_at: Date
}

/** Accounts for the operator, newest first; `q` matches part of the email (case-insensitive). */
export async function listAccounts (sql: Q, o: { q?: string; limit: number; offset: number }): Promise<{ rows: AccountListRow[]; total: number }> {
  const pattern = o.q ? `%${o.q.toLowerCase().replace(/[\\%_]/g, m => '\\' + m)}%` : null
  const [rows, [c]] = await Promise.all([
    sql<AccountListRow[]>`
      SELECT id, email, credits, email_verified, banned, credits_locked, has_purchased, enterprise, created_at FROM accounts
      WHERE ${pattern}::text IS NULL OR lower(email) LIKE ${pattern}
      ORDER BY id DESC LIMIT ${o.limit} OFFSET ${o.offset}`,
    sql<{ n: number }[]>`SELECT count(*)::int AS n FROM accounts WHERE ${pattern}::text IS NULL OR lower(email) LIKE ${pattern}`,
  ])
  return { rows, total: c.n }
}
