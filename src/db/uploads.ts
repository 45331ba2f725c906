import type { Q } from './connect.js'

/**
 * SQL for the uploads table (sql/0002_uploads.sql): the upload route writes it, the storage
 * sweeper deletes expired rows.
 */
export type UploadKind = 'image' | 'audio' | 'video'

export interface UploadRow {
  id: number
  account_id: number
  key: string
  kind: UploadKind
  size: number
  content_type: string
  created_at: Date
  expires_at: Date | null
}

export async function insertUpload (sql: Q, u: {
  accountId: number; key: string; kind: UploadKind; size: number; contentType: string; expiresAt: Date | null
}): Promise<UploadRow> {
  const [row] = await sql<UploadRow[]>`
    INSERT INTO uploads (account_id, key, kind, size, content_type, expires_at)
    VALUES (${u.accountId}, ${u.key}, ${u.kind}, ${u.size}, ${u.contentType}, ${u.expiresAt})
    RETURNING *`
  return row
}

/** Uploads whose expiry has passed, oldest first. */
export async function expiredUploads (sql: Q, now: Date, limit: number): Promise<Array<{ id: number; key: string }>> {
  return sql<Array<{ id: number; key: string }>>`
    SELECT id, key FROM uploads WHERE expires_at IS NOT NULL AND expires_at <= ${now}
    ORDER BY expires_at LIMIT ${limit}`
}

export async function deleteUploads (sql: Q, ids: number[]): Promise<number> {
  if (ids.length === 0) return 0
  const r = await sql`DELETE FROM uploads WHERE id = ANY(${ids}::bigint[])`
  return r.count
}
