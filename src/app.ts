import { loadRouting } from './providers/routing.js'
import { Providers } from './providers/registry.js'
import { randomBytes } from 'node:crypto'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { DeliveryPool } from './actors/delivery-pool.js'
import { ShardPool } from './actors/shard-pool.js'
import type { Config } from './config.js'
import { connect, containDriverFaults, DbHealth, type Sql } from './db/connect.js'
import { startEmbedded, type EmbeddedDb } from './db/embedded.js'
import { migrate } from './db/migrate.js'
import { Authenticator } from './http/auth.js'
import { buildOpenApi } from './http/openapi.js'
import { RateLimiter } from './http/rate-limit.js'
import type { Route } from './http/route.js'
import { allRoutes } from './http/routes/index.js'
import { HttpServer } from './http/server.js'
import { Metering } from './metering.js'
import type { Services } from './services.js'
import { Passwords } from './util/passwords.js'
import { JobCache } from './jobs/cache.js'
import { SseHub } from './http/sse.js'
import { Tickets } from './http/tickets.js'
import { RedisBus } from './redis.js'
import { RedisRateLimiter } from './http/rate-limit-redis.js'
import { MemoryLoginThrottle, RedisLoginThrottle } from './http/login-throttle.js'
import { createStorage } from './storage/index.js'
import { UploadSweeper } from './storage/sweeper.js'
import { Metrics } from './metrics.js'
import { createLogger } from './log.js'

export interface App {
  port: number
  url: string
  services: Services
  adminToken: string
  /** Graceful stop: drain requests, close the listen socket, stop shards, flush, stop embedded PG. */
  close: () => Promise<void>
}

export interface AppOptions {
  logger?: Logger
  /** Extra routes (tests). */
  routes?: Route[]
}

async function readVersion (): Promise<string> {
  for (const rel of ['../../package.json', '../package.json']) {
    try { return JSON.parse(await readFile(new URL(rel, import.meta.url), 'utf8')).version } catch {}
  }
  return '0.0.0'
}

/** Reads a secret from DATA_DIR, creating it (mode 600) the first time. */
async function persistedSecret (dataDir: string, name: string): Promise<{ value: string; created: boolean }> {
  const file = join(dataDir, name)
  try {
    const v = (await readFile(file, 'utf8')).trim()
    if (v) return { value: v, created: false }
  } catch {}
  await mkdir(dataDir, { recursive: true })
  const value = randomBytes(32).toString('hex')
  await writeFile(file, value + '\n', { mode: 0o600 })
  return { value, created: true }
}

/** Boots the whole service (src/main.ts only adds signals). Used by tests with PORT 0. */
export async function createApp (config: Config, opts: AppOptions = {}): Promise<App> {
  const log = opts.logger ?? createLogger(config.logLevel, { secrets: [config.adminToken ?? '', config.jwtSecret ?? '', config.metricsToken ?? ''] })
  let embedded: EmbeddedDb | null = null
  let databaseUrl = config.databaseUrl
  if (!databaseUrl) {
    embedded = await startEmbedded(config.dataDir, (m) => log.info(m))
    databaseUrl = embedded.url
    log.info({ dataDir: config.dataDir }, 'embedded PostgreSQL started (set DATABASE_URL to use your own)')
  }
  // A driver fault during a database outage must not take the process down (issue 15); only
  // installed when nobody else (a test runner) handles uncaught exceptions already.
  if (process.listenerCount('uncaughtException') === 0) containDriverFaults((msg, err) => log.error({ err }, msg))
  const sql: Sql = connect(databaseUrl, { max: 10, stallMs: config.dbStallTimeoutMs })
  const applied = await migrate(sql)
  if (applied.length) log.info({ applied }, 'migrations applied')

  let adminToken = config.adminToken
  if (!adminToken) {
    const s = await persistedSecret(config.dataDir, 'admin-token')
    adminToken = s.value
    if (s.created) {
      // Printed once, at generation; kept in DATA_DIR/admin-token for the CLI and restarts.
      process.stdout.write(`\nADMIN_TOKEN (generated, shown once; also saved in ${join(config.dataDir, 'admin-token')}):\n  ${adminToken}\n\n`)
    } else {
      log.info({ file: join(config.dataDir, 'admin-token') }, 'using the admin token saved in DATA_DIR')
    }
  }
  const jwtSecret = config.jwtSecret ?? (await persistedSecret(config.dataDir, 'jwt-secret')).value

  // The routing file is checked before any shard starts: a mistake is one clear boot error.
  loadRouting(config.providersFile, config.providerEnv)

  const nodeId = process.env.NODE_ID || (await persistedSecret(config.dataDir, 'node-id')).value.slice(0, 16)
  const bus = config.redisUrl ? new RedisBus(config.redisUrl, config.redisPrefix, nodeId, log) : null
  const jobs = new JobCache(config.jobCacheMb * 1024 * 1024)
  const metrics = new Metrics()
  const sse = new SseHub(config.sseHeartbeatMs)
  jobs.onUpdate((_accountId, view) => sse.publish(view))
  const shards = new ShardPool({
    shards: config.shards,
    databaseUrl,
    config,
    nodeId,
    onLog: (level, msg) => log[level](msg),
    onRestart: (shard, n) => { jobs.dropActive(a => a % n === shard) },
    onEvent: (ev) => {
      if (ev.type !== 'job.updated') return
      if (ev.job.status === 'completed' || ev.job.status === 'failed' || ev.job.status === 'cancelled') metrics.jobFinished(ev.job.status)
      jobs.update(ev.accountId, ev.job)
      bus?.publish({ t: 'job', a: ev.accountId, j: ev.job })
    },
  })
  await shards.ready()

  const auth = new Authenticator(sql, jwtSecret, adminToken)
  if (bus) {
    auth.onInvalidate = (k, id) => bus.publish({ t: 'inv', k, id })
    await bus.start((m) => {
      if (m.t === 'job') jobs.update(m.a, m.j)
      else if (m.k === 'key') auth.invalidateKey(m.id, false)
      else auth.invalidateAccount(Number(m.id), false)
    })
  }
  const passwords = new Passwords()
  const limiter = new RateLimiter()
  const metering = new Metering(sql, log, auth.lastUsed, config.meteringRetentionDays)
  const storage = await createStorage(config)
  const probeSql = connect(databaseUrl, { max: 1, stallMs: config.dbStallTimeoutMs })
  const dbHealth = new DbHealth(() => probeSql`SELECT 1`, 250, (up) => log.warn(up ? 'database reachable again' : 'database unreachable'))
  const providers = await Providers.load(config, storage, config.shards)
  const services: Services = {
    providers, config, sql, dbHealth, shards, auth, passwords, jwtSecret, log, metering, limiter, storage, jobs, sse, bus,
    redisLimiter: bus ? new RedisRateLimiter(bus.pub, config.redisPrefix) : null,
    loginThrottle: bus ? new RedisLoginThrottle(bus.pub, config.redisPrefix) : new MemoryLoginThrottle(), nodeId, tickets: new Tickets(jwtSecret),
    metrics, version: await readVersion()
  }
  const delivery = new DeliveryPool({ databaseUrl, config, version: services.version, onLog: (level, msg) => log[level](msg) }) // webhooks (DESIGN.md 2)
  await delivery.ready()
  metrics.setSources({
    sql,
    sseOpen: () => sse.size,
    workerStats: async () => {
      const [s, d] = await Promise.all([shards.stats(), delivery.stats()])
      return [...s, ...d]
    },
  })

  let doc: unknown = null
  const routes = allRoutes(() => doc, opts.routes)
  doc = Object.freeze(buildOpenApi(routes, { version: services.version, serverUrl: config.publicBaseUrl }))
  const server = new HttpServer(services, routes)
  const port = await server.listen(config.host, config.port)
  log.info({ port, shards: config.shards, database: embedded ? 'embedded' : 'external' }, 'listening')
  const sweeper = new UploadSweeper(sql, storage, log) // expired video uploads: at boot, then hourly
  sweeper.start()

  let closed: Promise<void> | null = null
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    services,
    adminToken,
    close: () => (closed ??= (async () => {
      sse.close()
      await server.close()
      await bus?.close()
      await shards.close()
      await metering.close()
      limiter.close()
      await passwords.close()
      await sweeper.stop()
      storage.close?.()
      await delivery.close()
      dbHealth.close()
      await probeSql.end({ timeout: 1 })
      await sql.end({ timeout: 5 })
      if (embedded) await embedded.stop()
    })()),
  }
}
