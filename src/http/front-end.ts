import type { Logger } from 'pino'
import type { Redis } from 'ioredis'
import type { Config } from '../config.js'
import { connect, DbHealth, ping, type Sql } from '../db/connect.js'
import { JobCache } from '../jobs/cache.js'
import { Metering } from '../metering.js'
import type { Metrics } from '../metrics.js'
import type { SharedProviderState } from '../providers/capacity.js'
import { Providers } from '../providers/registry.js'
import type { RedisBus } from '../redis.js'
import type { Services } from '../services.js'
import type { Shards } from '../shard/shard-pool.js'
import { createStorage } from '../storage/index.js'
import { ThreadBus } from '../threads/bus.js'
import { MemoryWindow, RedisSignupThrottle, type SignupThrottle } from './address-window.js'
import { Authenticator } from './auth.js'
import { ThreadedMetering } from './front-ends/metering.js'
import type { ThreadMessage } from './front-ends/protocol.js'
import { SharedRateLimiter, SharedStreamCounts, type SharedLimitsInit } from './front-ends/shared-limits.js'
import { RedisLoginThrottle, type LoginThrottle } from './login-throttle.js'
import { buildOpenApi } from './openapi.js'
import { RateLimiter } from './rate-limit.js'
import { RedisRateLimiter } from './rate-limit-redis.js'
import type { Route } from './route.js'
import { allRoutes } from './routes/index.js'
import { CALLBACK_REFUSALS_PER_MINUTE } from './routes/providers.js'
import { HttpServer } from './server.js'
import { SseHub } from './sse.js'
import { Tickets } from './tickets.js'

/**
 * What differs between the front end of the main thread and that of another front-end thread
 * (docs/architecture.md "Threads"): the services that are local on the main thread and asked
 * of it elsewhere, the shard handle (the pool or a client of it), the pools and buses.
 */
export interface FrontEndOptions {
  config: Config
  log: Logger
  /** This thread's PostgreSQL pool: its creator ends it after `close`. */
  sql: Sql
  databaseUrl: string
  jwtSecret: string
  adminToken: string
  nodeId: string
  version: string
  /** The shard pool (main thread) or a client of the shards (other front-end threads). */
  shards: Shards
  metrics: Metrics
  /** The counters every front-end thread shares (FRONTENDS > 1), else null: this thread's own. */
  limits: SharedLimitsInit | null
  /** The name of the thread bus (FRONTENDS > 1), else null. */
  threadBus: string | null
  /** Set when there are other front-end threads: flushes their metering (ThreadedMetering). */
  meteringPeers: ((accountId: number | null) => Promise<void>) | null
  /** Local on the main thread, asked of it on the others. */
  passwords: Services['passwords']
  imageScreen: Services['imageScreen']
  /** Used without Redis (with REDIS_URL the throttles are Redis's, across nodes). */
  loginThrottle: LoginThrottle
  signupThrottle: SignupThrottle
  /** A Redis connection (REDIS_URL) for the rate window and the throttles, else null; its creator closes it. */
  redis: Redis | null
  /** The bus between nodes (the main thread with REDIS_URL), else null; its creator closes it. */
  bus: RedisBus | null
  /** Upstream capacity shared with the shards (the main thread's). */
  providerState?: SharedProviderState
  /** Extra routes (tests). */
  routes?: Route[]
}

export interface FrontEnd {
  services: Services
  /** The thread bus (FRONTENDS > 1), else null. */
  threads: ThreadBus<ThreadMessage> | null
  /** Listens on `host:port` (0: any free port); resolves with the port. */
  listen (host: string, port: number): Promise<number>
  /** A crashing thread's first step: closes every socket now. */
  abort (): void
  /** Graceful stop: stop accepting, drain requests, end SSE streams, flush metering, close what it built. */
  close (): Promise<void>
}

/**
 * Builds one front end (docs/architecture.md "Threads"): caches, authentication, metering,
 * the provider adapters that verify callbacks, the routes, the OpenAPI document and the
 * HttpServer, with one close sequence. The main thread (src/app.ts) and every other front-end
 * thread (src/http/front-ends/worker.ts) build theirs here, passing only what differs.
 */
export async function buildFrontEnd (o: FrontEndOptions): Promise<FrontEnd> {
  const { config, log, sql } = o
  const jobs = new JobCache(config.jobCacheMb * 1024 * 1024)
  const sse = new SseHub(config.sseHeartbeatMs, o.limits ? new SharedStreamCounts(o.limits.streams) : undefined)
  jobs.onUpdate((_accountId, view) => sse.publish(view))
  // AUTH_CACHE_MB: 3/4 for this thread's credential caches (the main thread's in-memory login
  // throttle has the other quarter).
  const auth = new Authenticator(sql, o.jwtSecret, o.adminToken, 5000, Math.floor(config.authCacheMb * 1024 * 1024 * 3 / 4))
  // The other front-end threads of this process hear what this one hears first: job events
  // (posted by the main thread), invalidations, shard restarts.
  const threads = o.threadBus === null ? null : new ThreadBus<ThreadMessage>(o.threadBus, (m) => {
    if (m.t === 'job') jobs.update(m.a, m.j)
    else if (m.t === 'prog') jobs.progress(m.a, m.p)
    else if (m.t === 'drop') jobs.dropActive(a => a % m.n === m.shard)
    else {
      if (m.k === 'key') auth.invalidateKey(m.id, false)
      else auth.invalidateAccount(Number(m.id), false)
      o.bus?.publish({ t: 'inv', k: m.k, id: m.id })
    }
  })
  auth.onInvalidate = (k, id) => {
    o.bus?.publish({ t: 'inv', k, id })
    threads?.post({ t: 'inv', k, id })
  }
  let metering: Metering
  if (o.meteringPeers === null) metering = new Metering(sql, log, auth.lastUsed, config.meteringRetentionDays)
  else {
    const threaded = new ThreadedMetering(sql, log, auth.lastUsed, config.meteringRetentionDays)
    threaded.peers = o.meteringPeers
    metering = threaded
  }
  const limiter = o.limits ? new SharedRateLimiter(o.limits.rate) : new RateLimiter()
  const storage = await createStorage(config)
  const probeSql = connect(o.databaseUrl, { max: 1, stallMs: config.dbStallTimeoutMs })
  const dbHealth = new DbHealth(() => ping(probeSql), 250, (up, why) => log.warn(up ? 'database reachable again' : `database unreachable (${why})`))
  const providers = await Providers.load(config, storage, config.shards, { shared: o.providerState, log: (msg, extra) => log.warn(extra ?? {}, msg) })
  const redis = o.redis
  const services: Services = {
    providers,
    config,
    sql,
    dbHealth,
    shards: o.shards,
    auth,
    passwords: o.passwords,
    imageScreen: o.imageScreen,
    jwtSecret: o.jwtSecret,
    log,
    metering,
    limiter,
    storage,
    jobs,
    sse,
    bus: o.bus,
    redisLimiter: redis ? new RedisRateLimiter(redis, config.redisPrefix) : null,
    loginThrottle: redis ? new RedisLoginThrottle(redis, config.redisPrefix) : o.loginThrottle,
    signupThrottle: redis ? new RedisSignupThrottle(redis, config.redisPrefix) : o.signupThrottle,
    callbackRefusals: new MemoryWindow(CALLBACK_REFUSALS_PER_MINUTE, 60_000),
    nodeId: o.nodeId,
    tickets: new Tickets(o.jwtSecret),
    metrics: o.metrics,
    version: o.version,
  }

  let doc: unknown = null
  const routes = allRoutes(() => doc, o.routes)
  doc = Object.freeze(buildOpenApi(routes, { version: o.version, serverUrl: config.publicBaseUrl }))
  const server = new HttpServer(services, routes)

  let closed: Promise<void> | null = null
  return {
    services,
    threads,
    listen: (host, port) => server.listen(host, port),
    abort: () => server.abort(),
    close: () => (closed ??= (async () => {
      sse.close()
      await server.close()
      threads?.close()
      await metering.close()
      limiter.close()
      providers.close()
      storage.close?.()
      dbHealth.close()
      await probeSql.end({ timeout: 1 })
    })()),
  }
}
