import { randomBytes } from 'node:crypto'
import postgres from 'postgres'

/** The server tests create their databases on (scripts/test.mjs sets it; embedded when unset). */
export const ADMIN_DATABASE_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres'

/**
 * A fresh database for one test file, dropped at teardown: files run in parallel without
 * seeing each other's rows (DEVELOPERS.md: no mocked database).
 */
export async function freshDatabase (t: { teardown: (fn: () => Promise<void> | void) => void }): Promise<string> {
  const name = `gjt_${process.pid}_${randomBytes(4).toString('hex')}`
  const admin = postgres(ADMIN_DATABASE_URL, { max: 1, onnotice: () => {} })
  await admin.unsafe(`CREATE DATABASE ${name}`)
  await admin.end()
  t.teardown(async () => {
    const a = postgres(ADMIN_DATABASE_URL, { max: 1, onnotice: () => {} })
    await a.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {})
    await a.end()
  })
  const u = new URL(ADMIN_DATABASE_URL)
  u.pathname = `/${name}`
  return u.toString()
}
