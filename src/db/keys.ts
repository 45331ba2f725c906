import type { Q, Sql } from './connect.js'

/** An api_keys row (docs/api.md "Accounts, sessions and keys"); the secret is never stored, only its SHA-256. */
export interface KeyRow {
  id: number
  account_id: number
  key_hash: string
  prefix: string
  name: string | null
  scopes: string[]
  expires_at: Date | null
  revoked_at: Date | null
  last_used_at: Date | null
  created_at: Date
}

export async function findKeyByHash (sql: Q, hash: string): Promise<KeyRow | undefined> {
  const [row] = await sql<KeyRow[]>`SELECT * FROM api_keys WHERE key_hash = ${hash}`
  return row
}

export async function listKeys (sql: Q, accountId: number): Promise<KeyRow[]> {
  return sql<KeyRow[]>`SELECT * FROM api_keys WHERE account_id = ${accountId} AND revoked_at IS NULL ORDER BY id DESC`
}

export const MAX_ACTIVE_KEYS = 5

/**
 * Inserts a key unless the account already has MAX_ACTIVE_KEYS active ones. The account row
 * is locked so two concurrent creations cannot both pass the count. Null when at the limit.
 */
export async function insertKey (sql: Sql, k: {
  accountId: number; hash: string; prefix: string; name: string | null; expiresAt: Date | null
}): Promise<KeyRow | null> {
  const run = async (tx: Q) => {
    await tx`SELECT id FROM accounts WHERE id = ${k.accountId} FOR UPDATE`
    const [{ n }] = await tx<{ n: number }[]>`
      SELECT count(*)::int AS n FROM api_keys
      WHERE account_id = ${k.accountId} AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`
    if (n >= MAX_ACTIVE_KEYS) return null
    const [row] = await tx<KeyRow[]>`
      INSERT INTO api_keys (account_id, key_hash, prefix, name, expires_at)
      VALUES (${k.accountId}, ${k.hash}, ${k.prefix}, ${k.name}, ${k.expiresAt}) RETURNING *`
    return row
  }
  return sql.begin(run) as Promise<KeyRow | null>
}

/** Replaces a key's secret; the old hash stops matching at once. */
export async function rotateKey (sql: Q, accountId: number, id: number, hash: string, prefix: string): Promise<{ row: KeyRow; oldHash: string } | 'not_found' | 'revoked'> {
  const [old] = await sql<KeyRow[]>`SELECT * FROM api_keys WHERE id = ${id} AND account_id = ${accountId}`
  if (!old) return 'not_found'
  if (old.revoked_at !== null) return 'revoked'
  const [row] = await sql<KeyRow[]>`
    UPDATE api_keys SET key_hash = ${hash}, prefix = ${prefix}
    WHERE id = ${id} AND account_id = ${accountId} AND revoked_at IS NULL RETURNING *`
  if (!row) return 'revoked'
  return { row, oldHash: old.key_hash }
}

/** Soft revoke; null when there is no active key with that id. Returns the revoked hash. */
export async function revokeKey (sql: Q, accountId: number, id: number): Promise<string | null> {
  const [row] = await sql<{ key_hash: string }[]>`
    UPDATE api_keys SET revoked_at = now() WHERE id = ${id} AND account_id = ${accountId} AND revoked_at IS NULL RETURNING key_hash`
  return row ? row.key_hash : null
}

export async function countActiveKeys (sql: Q, accountId: number): Promise<number> {
  const [{ n }] = await sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM api_keys WHERE account_id = ${accountId} AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`
  return n
}

/** Batched last_used_at update (from the metering flush, never on the request path). */
export async function touchKeys (sql: Q, used: Array<[number, number]>): Promise<void> {
  if (used.length === 0) return
  const ids = used.map(u => u[0])
  const ats = used.map(u => new Date(u[1]).toISOString())
  await sql`
    UPDATE api_keys k SET last_used_at = v.at
    FROM (SELECT unnest(${ids}::bigint[]) AS id, unnest(${ats}::timestamptz[]) AS at) v
    WHERE k.id = v.id AND (k.last_used_at IS NULL OR k.last_used_at < v.at)`
}
