/**
 * The service under test with a fresh database: created on DATABASE_URL's server, the
 * service started on it (migrations run at boot), dropped after the scenario.
 */
import { startService, type ServiceProcess } from './children.js'
import type { BenchOptions } from './scenario.js'
import { createDatabase, type BenchDatabase } from './seed.js'

/** Every tier's limits raised so they never cap a run; the limiter itself still runs per request. */
export const RAISED_TIER_LIMITS = JSON.stringify(Object.fromEntries(
  ['free', 'pro', 'enterprise', 'session'].map(t => [t, { rpm: 1_000_000_000, max_concurrent: 1_000_000_000, max_streams: 1_000_000_000 }])))

export interface Stack {
  db: BenchDatabase
  svc: ServiceProcess
  /** Stops the service (SIGTERM; it drains and exits). Idempotent. */
  stopService (): Promise<void>
  /** Stops the service and starts a new process on the same database (new pid and port). */
  restart (): Promise<ServiceProcess>
  /** Stops the service if needed, then drops the database. */
  close (): Promise<void>
}

export async function bootStack (o: BenchOptions, scenario: string, env: Record<string, string>): Promise<Stack> {
  const db = await createDatabase(o.databaseUrl, scenario)
  const start = () => startService({ databaseUrl: db.url, env: { TIER_LIMITS: RAISED_TIER_LIMITS, ...env }, nodeFlags: o.nodeFlags })
  let svc: ServiceProcess
  try { svc = await start() } catch (err) { await db.drop().catch(() => {}); throw err }
  let stopped: Promise<void> | null = null
  const stack: Stack = {
    db,
    svc,
    stopService: () => (stopped ??= svc.stop().then((code) => {
      if (code !== 0) o.log(`  service exited with ${code}`)
      const err = svc.stderr().trim()
      if (err) o.log(`  service log (last 2000 chars):\n${err.slice(-2000)}`)
    })),
    restart: async () => {
      await stack.stopService()
      svc = await start()
      stack.svc = svc
      stopped = null
      return svc
    },
    close: async () => { await stack.stopService(); await db.drop() },
  }
  return stack
}
