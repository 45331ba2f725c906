import { readdir, readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { join } from 'node:path'
import type { Sql } from './connect.js'

/**
 * Applies sql/NNNN_name.sql files in order, each in its own transaction, once. An advisory
 * lock serialises nodes starting together against one database.
 */
export async function migrate (sql: Sql, dirArg?: string): Promise<string[]> {
  const dir = dirArg ?? await findSqlDir()
  const files = (await readdir(dir)).filter(f => /^\d{4}_.+\.sql$/.test(f)).sort()
  const applied: string[] = []
  await sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(727274)`
    await tx`CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`
    const done = new Set((await tx<{ name: string }[]>`SELECT name FROM schema_migrations`).map(r => r.name))
    for (const f of files) {
      if (done.has(f)) continue
      await tx.unsafe(await readFile(join(dir, f), 'utf8'))
      await tx`INSERT INTO schema_migrations (name) VALUES (${f})`
      applied.push(f)
    }
  })
  return applied
}

async function findSqlDir (): Promise<string> {
  // dist/src/db -> ../../../sql ; src/db -> ../../sql
  for (const rel of ['../../../sql/', '../../sql/']) {
    const p = fileURLToPath(new URL(rel, import.meta.url))
    try { await readdir(p); return p } catch {}
  }
  throw new Error('sql/ migrations directory not found')
}
