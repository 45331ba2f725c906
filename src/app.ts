import { loadRouting } from './providers/routing.js'
import { Providers } from './providers/registry.js'
import { randomBytes } from 'node:crypto'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { DeliveryPool } from './webhooks/delivery-pool.js'
import { ShardPool } from './shard/shard-pool.js'
import type { Config } from './config.js'
import { connect, containDriverFaults, DbHealth, ping, type Sql } from './db/connect.js'
import { startEmbedded, type EmbeddedDb } from './db/embedded.js'
import { migrate } from './db/migrate.js'
import { Authenticator } from './http/auth.js'
import { buildOpenApi } from './http/openapi.js'
import { RateLimiter } from './http/rate-limit.js'
import type { Route } from './http/route.js'
import { allRoutes } from './http/routes/index.js'
import { HttpServer } from './http/server.js'
import { Metering } from './metering.js'
import { ThreadedMetering } from './http/front-ends/metering.js'
import type { Services } from './services.js'
import { Passwords } from './util/passwords.js'
import { ImageScreen } from './media/screen.js'
import { JobCache } from './jobs/cache.js'
import { SseHub } from './http/sse.js'
import { Tickets } from './http/tickets.js'
import { RedisBus } from './redis.js'
import { RedisRateLimiter } from './http/rate-limit-redis.js'
import { MemoryLoginThrottle, RedisLoginThrottle } from './http/login-throttle.js'
import { MemorySignupThrottle, MemoryWindow, RedisSignupThrottle } from './http/address-window.js'
import { CALLBACK_REFUSALS_PER_MINUTE } from './http/routes/providers.js'
import { createStorage } from './storage/index.js'
import { UploadSweeper } from './storage/sweeper.js'
import { Metrics } from './metrics.js'
import { nodeRouteStates } from './providers/route-states.js'
import { trackSize } from './worker-stats.js'
import { createLogger } from './log.js'
import { createServer } from 'node:net'
import { ThreadBus } from './threads/bus.js'
import { FrontendPool } from './http/front-ends/pool.js'
import { createSharedProviderState } from './providers/capacity.js'
import { createSharedLimits, SharedRateLimiter, SharedStreamCounts } from './http/front-ends/shared-limits.js'

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
  const bus = config.redisUrl ? new RedisBus(config.redisUrl, config.redisPrefix, nodeId, log) : null
  const jobs = new JobCache(config.jobCacheMb * 1024 * 1024)
  const metrics = new Metrics({ processMetrics: true })
  // Front-end threads (docs/decisions.md "Front-end threads"): test-only extra routes are
  // functions, which cannot cross threads, so an app given some keeps one front end.
  const frontends = opts.routes?.length ? 1 : config.frontends
  if (frontends !== config.frontends) log.info({ frontends: config.frontends }, 'extra routes given: one front-end thread')
  const limits = frontends > 1 ? createSharedLimits() : null
  let frontPool: FrontendPool | null = null
  const sse = new SseHub(config.sseHeartbeatMs, limits ? new SharedStreamCounts(limits.streams) : undefined)
  const busName = `genjobs-frontends-${randomBytes(8).toString('hex')}`
  let auth: Authenticator | null = null
  // Main thread side of the thread bus: invalidations made on another front end go to Redis too.
  const threads = limits ? new ThreadBus(busName, (m) => {
    if (m.t !== 'inv') return
    if (m.k === 'key') auth?.invalidateKey(m.id, false)
    else auth?.invalidateAccount(Number(m.id), false)
    bus?.publish({ t: 'inv', k: m.k, id: m.id })
  }) : null
  jobs.onUpdate((_accountId, view) => sse.publish(view))
  // Upstream capacity and request budgets the shards (and this thread) count in together.
  const providerState = createSharedProviderState(config.shards)
  const shards = new ShardPool({
    shards: config.shards,
    databaseUrl,
    config,
    nodeId,
    providerState,
    onLog: (level, msg) => log[level](msg),
    onRestart: (shard, n) => {
      jobs.dropActive(a => a % n === shard)
      threads?.post({ t: 'drop', shard, n })
      frontPool?.shardRestarted(shard)
    },
    onEvent: (ev) => {
      if (ev.type === 'job.progress') {
        // Compact non-terminal change: patched into the cached view; other front-end
        // threads patch theirs; other nodes get the full view (their caches may lack it).
        threads?.post({ t: 'prog', a: ev.accountId, p: { id: ev.id, status: ev.status, progress: ev.progress, updated_at: ev.updated_at } })
        const view = jobs.progress(ev.accountId, ev)
        if (view !== null) bus?.publish({ t: 'job', a: ev.accountId, j: view })
        return
      }
      if (ev.type !== 'job.updated') return
      if (ev.job.status === 'completed' || ev.job.status === 'failed' || ev.job.status === 'cancelled') metrics.jobFinished(ev.job.status)
      // The other front-end threads first: they fan out to their SSE streams while this thread
      // writes to its own, instead of after it.
      threads?.post({ t: 'job', a: ev.accountId, j: ev.job })
      jobs.update(ev.accountId, ev.job)
      bus?.publish({ t: 'job', a: ev.accountId, j: ev.job })
    },
  })
  await shards.ready()

  // AUTH_CACHE_MB: 3/4 for the credential caches, 1/4 for the in-process login throttle.
  const authBudget = config.authCacheMb * 1024 * 1024
  auth = new Authenticator(sql, jwtSecret, adminToken, 5000, Math.floor(authBudget * 3 / 4))
  const authn = auth
  auth.onInvalidate = (k, id) => {
    bus?.publish({ t: 'inv', k, id })
    threads?.post({ t: 'inv', k, id })
  }
  if (bus) {
    await bus.start((m) => {
      // The other front-end threads of this node hear it too (first: they fan out meanwhile).
      threads?.post(m.t === 'job' ? { t: 'job', a: m.a, j: m.j } : { t: 'inv', k: m.k, id: m.id })
      if (m.t === 'job') jobs.update(m.a, m.j)
      else if (m.k === 'key') authn.invalidateKey(m.id, false)
      else authn.invalidateAccount(Number(m.id), false)
    })
  }
  const passwords = new Passwords()
  const imageScreen = new ImageScreen()
  const limiter = limits ? new SharedRateLimiter(limits.rate) : new RateLimiter()
  const metering = limits
    ? new ThreadedMetering(sql, log, auth.lastUsed, config.meteringRetentionDays)
    : new Metering(sql, log, auth.lastUsed, config.meteringRetentionDays)
  if (metering instanceof ThreadedMetering) metering.peers = (accountId) => frontPool?.flushMetering(accountId) ?? Promise.resolve()
  const storage = await createStorage(config)
  const probeSql = connect(databaseUrl, { max: 1, stallMs: config.dbStallTimeoutMs })
  const dbHealth = new DbHealth(() => ping(probeSql), 250, (up, why) => log.warn(up ? 'database reachable again' : `database unreachable (${why})`))
  const providers = await Providers.load(config, storage, config.shards, { shared: providerState, log: (msg, extra) => log.warn(extra ?? {}, msg) })
  const services: Services = {
    providers, config, sql, dbHealth, shards, auth, passwords, imageScreen, jwtSecret, log, metering, limiter, storage, jobs, sse, bus,
    redisLimiter: bus ? new RedisRateLimiter(bus.pub, config.redisPrefix) : null,
    loginThrottle: bus ? new RedisLoginThrottle(bus.pub, config.redisPrefix) : new MemoryLoginThrottle(Math.floor(authBudget / 4)),
    signupThrottle: bus ? new RedisSignupThrottle(bus.pub, config.redisPrefix) : new MemorySignupThrottle(),
    callbackRefusals: new MemoryWindow(CALLBACK_REFUSALS_PER_MINUTE, 60_000),
    nodeId, tickets: new Tickets(jwtSecret),
    metrics, version: await readVersion()
  }
  // webhooks (docs/architecture.md "Threads")
  const delivery = new DeliveryPool({
    databaseUrl, config, version: services.version, maxWorkers: config.webhookWorkers, onLog: (level, msg) => log[level](msg),
  })
  await delivery.ready()
  trackSize('job_cache', () => jobs.size)
  trackSize('job_cache_bytes', () => jobs.bytes)
  trackSize('auth_keys', () => authn.cacheSizes.keys)
  trackSize('auth_accounts', () => authn.cacheSizes.accounts)
  trackSize('auth_cache_bytes', () => authn.cacheSizes.bytes)
  trackSize('metering_pending', () => metering.pending)
  trackSize('rate_limit_windows', () => limiter instanceof RateLimiter ? limiter.size : limiter.size())
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

  let doc: unknown = null
  const routes = allRoutes(() => doc, opts.routes)
  doc = Object.freeze(buildOpenApi(routes, { version: services.version, serverUrl: config.publicBaseUrl }))
  const server = new HttpServer(services, routes)
  let port: number
  if (frontends === 1) port = await server.listen(config.host, config.port)
  else {
    // Every front end listens on one fixed port; a port picked free can be taken by someone else before we bind it: retry.
    for (let attempt = 0; ; attempt++) {
      try { port = await server.listen(config.host, config.port || await freePort(config.host)); break } catch (err) {
        if (config.port !== 0 || attempt >= 5) throw err
      }
    }
    frontPool = new FrontendPool({
      extra: frontends - 1,
      shards,
      init: {
        config, databaseUrl, nodeId, jwtSecret, adminToken, version: services.version,
        host: config.host, port, shards: config.shards, limits: limits!, bus: busName,
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
      sse.close()
      await Promise.all([server.close(), frontPool?.close()])
      threads?.close()
      await bus?.close()
      await shards.close()
      providers.close()
      await metering.close()
      limiter.close()
      await passwords.close()
      await imageScreen.close()
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
