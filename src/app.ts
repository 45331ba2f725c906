import { loadRouting } from './providers/routing.js'
import { randomBytes } from 'node:crypto'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { createServer } from 'node:net'
import type { Logger } from 'pino'
import { DeliveryPool } from './webhooks/delivery-pool.js'
import { ShardPool } from './shard/shard-pool.js'
import type { ShardEvent } from './shard/protocol.js'
import type { Config } from './config.js'
import { connect, containDriverFaults, type Sql } from './db/connect.js'
import { startEmbedded, type EmbeddedDb } from './db/embedded.js'
import { migrate } from './db/migrate.js'
import { buildFrontEnd, type FrontEnd } from './http/front-end.js'
import { RateLimiter } from './http/rate-limit.js'
import type { Route } from './http/route.js'
import type { Services } from './services.js'
import { Passwords } from './util/passwords.js'
import { ImageScreen } from './media/screen.js'
import { RedisBus } from './redis.js'
import { MemoryLoginThrottle } from './http/login-throttle.js'
import { MemorySignupThrottle } from './http/address-window.js'
import { UploadSweeper } from './storage/sweeper.js'
import { Metrics } from './metrics.js'
import { nodeRouteStates } from './shard/shard-pool.js'
import { trackSize } from './worker-stats.js'
import { createLogger } from './log.js'
import { FrontendPool } from './http/front-ends/pool.js'
import { createSharedProviderState } from './providers/capacity.js'
import { createSharedLimits, type SharedRateLimiter } from './http/front-ends/shared-limits.js'

export interface App {
  port: number
  url: string
  services: Services
  adminToken: string
  /** Graceful stop: drain requests, close the listen socket, stop shards, flush, stop embedded PG. */
  close: () => Promise<void>
  /** The front-end threads besides the main one (FRONTENDS > 1), else null. */
  frontends: FrontendPool | null
}

/** A port free now on `host`: front-end threads share a fixed port (uWS sets SO_REUSEPORT only for a non-zero port). */
function freePort (host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer()
    srv.once('error', reject)
    srv.listen(0, host, () => {
      const port = (srv.address() as { port: number }).port
      srv.close(() => resolve(port))
    })
  })
}

/**
 * A shard's event on the main thread: the other front-end threads first (they fan out to their
 * SSE streams while this thread writes to its own), then this thread's read cache, then the
 * other nodes (Redis).
 */
function relay (front: FrontEnd, ev: ShardEvent): void {
  const { jobs, bus, metrics } = front.services
  if (ev.type === 'job.progress') {
    // Compact non-terminal change: patched into the cached view; other front-end
    // threads patch theirs; other nodes get the full view (their caches may lack it).
    front.threads?.post({ t: 'prog', a: ev.accountId, p: { id: ev.id, status: ev.status, progress: ev.progress, updated_at: ev.updated_at } })
    const view = jobs.progress(ev.accountId, ev)
    if (view !== null) bus?.publish({ t: 'job', a: ev.accountId, j: view })
    return
  }
  if (ev.job.status === 'completed' || ev.job.status === 'failed' || ev.job.status === 'cancelled') metrics.jobFinished(ev.job.status)
  front.threads?.post({ t: 'job', a: ev.accountId, j: ev.job })
  jobs.update(ev.accountId, ev.job)
  bus?.publish({ t: 'job', a: ev.accountId, j: ev.job })
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

/**
 * Boots the whole service (src/main.ts only adds signals); the composition root of the main
 * thread (docs/architecture.md "Threads"): the shard pool, the front end (src/http/front-end.ts),
 * the delivery pool, the other front-end threads. Used by tests with PORT 0.
 */
export async function createApp (config: Config, opts: AppOptions = {}): Promise<App> {
  const log = opts.logger ?? createLogger(config.logLevel, { secrets: [config.adminToken ?? '', config.jwtSecret ?? '', config.metricsToken ?? ''] })
  // The routing file (and each route against its upstream schema) is checked before anything
  // starts, the database included: a mistake is one clear boot error.
  loadRouting(config.providersFile, config.providerEnv)
  let embedded: EmbeddedDb | null = null
  let databaseUrl = config.databaseUrl
  if (!databaseUrl) {
    embedded = await startEmbedded(config.dataDir, (m) => log.info(m))
    databaseUrl = embedded.url
    log.info({ dataDir: config.dataDir }, 'embedded PostgreSQL started (set DATABASE_URL to use your own)')
  }
  // Neither a driver fault during a database outage nor an error escaping one request takes the
  // process down (docs/operations.md "Hostile input"); only installed when nobody else (a test
  // runner) handles uncaught exceptions already.
  if (process.listenerCount('uncaughtException') === 0) containDriverFaults((msg, err) => log.error({ err }, msg), true)
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


  const nodeId = process.env.NODE_ID || (await persistedSecret(config.dataDir, 'node-id')).value.slice(0, 16)
  const version = await readVersion()
  const bus = config.redisUrl ? new RedisBus(config.redisUrl, config.redisPrefix, nodeId, log) : null
  const metrics = new Metrics({ processMetrics: true })
  // Front-end threads (docs/decisions.md "Front-end threads"): test-only extra routes are
  // functions, which cannot cross threads, so an app given some keeps one front end.
  const frontends = opts.routes?.length ? 1 : config.frontends
  if (frontends !== config.frontends) log.info({ frontends: config.frontends }, 'extra routes given: one front-end thread')
  const limits = frontends > 1 ? createSharedLimits() : null
  const threadBus = limits ? `genjobs-frontends-${randomBytes(8).toString('hex')}` : null
  let frontPool: FrontendPool | null = null
  // Upstream capacity and request budgets the shards (and this thread) count in together.
  const providerState = createSharedProviderState(config.shards)
  // The shards boot while the front end is built; what they report before it exists waits for it.
  let front: FrontEnd | null = null
  const early: ShardEvent[] = []
  // webhooks (docs/architecture.md "Threads"): the shards hand it their completions' outbox rows.
  const delivery = new DeliveryPool({
    databaseUrl, config, version, maxWorkers: config.webhookWorkers, onLog: (level, msg) => log[level](msg),
  })
  const shards = new ShardPool({
    shards: config.shards,
    databaseUrl,
    config,
    nodeId,
    providerState,
    onLog: (level, msg) => log[level](msg),
    onRestart: (shard, n) => {
      front?.services.jobs.dropActive(a => a % n === shard)
      front?.threads?.post({ t: 'drop', shard, n })
      frontPool?.shardRestarted(shard)
    },
    onEvent: (ev) => { if (front) relay(front, ev); else early.push(ev) },
    onDeliveries: (rows) => delivery.hand(rows),
  })
  const passwords = new Passwords()
  const imageScreen = new ImageScreen()
  // AUTH_CACHE_MB: 3/4 for the credential caches (src/http/front-end.ts), 1/4 for the in-process login throttle.
  const loginThrottle = new MemoryLoginThrottle(Math.floor(config.authCacheMb * 1024 * 1024 / 4))
  const fe = front = await buildFrontEnd({
    config, log, sql, databaseUrl, jwtSecret, adminToken, nodeId, version, shards, metrics, limits, providerState,
    threadBus,
    meteringPeers: limits ? (accountId) => frontPool?.flushMetering(accountId) ?? Promise.resolve() : null,
    passwords, imageScreen, loginThrottle, signupThrottle: new MemorySignupThrottle(),
    redis: bus?.pub ?? null,
    bus,
    routes: opts.routes,
  })
  for (const ev of early.splice(0)) relay(fe, ev)
  const services = fe.services
  const { jobs, auth, metering, limiter, sse, storage } = services
  await shards.ready()
  if (bus) {
    await bus.start((m) => {
      // The other front-end threads of this node hear it too (first: they fan out meanwhile).
      fe.threads?.post(m.t === 'job' ? { t: 'job', a: m.a, j: m.j } : { t: 'inv', k: m.k, id: m.id })
      if (m.t === 'job') jobs.update(m.a, m.j)
      else if (m.k === 'key') auth.invalidateKey(m.id, false)
      else auth.invalidateAccount(Number(m.id), false)
    })
  }
  await delivery.ready()
  trackSize('job_cache', () => jobs.size)
  trackSize('job_cache_bytes', () => jobs.bytes)
  trackSize('auth_keys', () => auth.cacheSizes.keys)
  trackSize('auth_accounts', () => auth.cacheSizes.accounts)
  trackSize('auth_cache_bytes', () => auth.cacheSizes.bytes)
  trackSize('metering_pending', () => metering.pending)
  trackSize('rate_limit_windows', () => limiter instanceof RateLimiter ? limiter.size : (limiter as SharedRateLimiter).size())
  metrics.setSources({
    sql,
    sseOpen: () => sse.size,
    frontends: () => frontPool?.stats() ?? Promise.resolve([]),
    routes: () => nodeRouteStates(shards, config.providersFile),
    workerStats: async () => {
      const [s, d] = await Promise.all([shards.stats(), delivery.stats()])
      return [...s, ...d]
    },
  })

  let port: number
  if (frontends === 1) port = await fe.listen(config.host, config.port)
  else {
    // Every front end listens on one fixed port; a port picked free can be taken by someone else before we bind it: retry.
    for (let attempt = 0; ; attempt++) {
      try { port = await fe.listen(config.host, config.port || await freePort(config.host)); break } catch (err) {
        if (config.port !== 0 || attempt >= 5) throw err
      }
    }
    frontPool = new FrontendPool({
      extra: frontends - 1,
      shards,
      init: {
        config, databaseUrl, nodeId, jwtSecret, adminToken, version,
        host: config.host, port, shards: config.shards, limits: limits!, bus: threadBus!,
      },
      handlers: {
        'password.hash': (r) => passwords.hash(r.password),
        'password.verify': (r) => passwords.verify(r.password, r.hash),
        'image.screen': (r) => imageScreen.screen(r),
        'login.check': (r) => services.loginThrottle.check(r.email, r.ip),
        'login.failed': async (r) => { await services.loginThrottle.failed(r.email, r.ip); return null },
        'login.succeeded': async (r) => { await services.loginThrottle.succeeded(r.email); return null },
        'signup.take': (r) => services.signupThrottle.take(r.ip),
        'metrics.scrape': () => metrics.scrape(),
        'metering.flush': async (r) => { await (r.accountId === null ? metering.flush() : metering.flushFor(r.accountId)); return null },
      },
      onLog: (level, msg) => log[level](msg),
    })
    await frontPool.ready()
  }
  log.info({ port, shards: config.shards, frontends, database: embedded ? 'embedded' : 'external' }, 'listening')
  const sweeper = new UploadSweeper(sql, storage, log) // expired video uploads: at boot, then hourly
  sweeper.start()

  let closed: Promise<void> | null = null
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    services,
    adminToken,
    get frontends () { return frontPool },
    close: () => (closed ??= (async () => {
      await sweeper.stop()
      // The front ends drain first (the other threads still ask this one meanwhile), then what they used.
      await Promise.all([fe.close(), frontPool?.close()])
      await bus?.close()
      await shards.close()
      await passwords.close()
      await imageScreen.close()
      await delivery.close()
      await sql.end({ timeout: 5 })
      if (embedded) await embedded.stop()
    })()),
  }
}
