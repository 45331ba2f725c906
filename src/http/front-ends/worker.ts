import { parentPort, workerData } from 'node:worker_threads'
import { Redis } from 'ioredis'
import { createLogger } from '../../log.js'
import { connect, DbHealth, isDbUnavailable, isDriverFault, ping, type Sql } from '../../db/connect.js'
import { Authenticator } from '../auth.js'
import { buildOpenApi } from '../openapi.js'
import { allRoutes } from '../routes/index.js'
import { HttpServer } from '../server.js'
import { SseHub } from '../sse.js'
import { Tickets } from '../tickets.js'
import { RedisRateLimiter } from '../rate-limit-redis.js'
import { RedisLoginThrottle, type LoginThrottle } from '../login-throttle.js'
import { MemoryWindow, RedisSignupThrottle, type SignupThrottle } from '../address-window.js'
import { CALLBACK_REFUSALS_PER_MINUTE } from '../routes/providers.js'
import { JobCache } from '../../jobs/cache.js'
import { ThreadedMetering } from './metering.js'
import { Metrics } from '../../metrics.js'
import { Providers } from '../../providers/registry.js'
import { createStorage } from '../../storage/index.js'
import type { Services } from '../../services.js'
import { ThreadBus } from '../../threads/bus.js'
import type { FrontendCalls, FrontendInit, MainCalls, ToFrontend, ToMain } from './protocol.js'
import { containEscaped } from '../../escaped.js'
import { Rpc } from '../../threads/rpc.js'
import { ShardClient } from '../../shard/shard-client.js'
import { SharedRateLimiter, SharedStreamCounts } from './shared-limits.js'

/**
 * A front-end thread other than the main one (docs/decisions.md "Front-end threads"): its own
 * uWS App on the shared port (SO_REUSEPORT), its own caches and pools, the shards reached
 * through its own ports, the exact counters in shared memory, the password pool, the login
 * throttle and /metrics on the main thread.
 */
const init = workerData as FrontendInit
const config = init.config
const log = createLogger(config.logLevel, { base: { frontend: init.index }, secrets: [init.adminToken, init.jwtSecret, config.metricsToken ?? ''] })

let server: HttpServer | null = null
// A failure nothing handled: close every socket first (a thread may not exit with uWS sockets
// open, or Node aborts the whole process), then exit; the main thread restarts this one and
// the port keeps being served by the other threads meanwhile.
// The database outage faults src/db/connect.ts containDriverFaults contains are contained here too.
/** The test hook's failure: the one uncaught error that still restarts the thread. */
class RequestedCrash extends Error {}
let failed = false
process.on('uncaughtException', (err) => {
  if (isDriverFault(err) || isDbUnavailable(err)) { log.error({ err }, 'database fault during an outage contained'); return }
  // No request stops a front end (docs/operations.md "Hostile input"): an error that escaped one
  // is logged and counted, and this thread's other connections go on being served.
  if (!(err instanceof RequestedCrash)) { containEscaped(err, log, 'uncaughtException'); return }
  log.error({ err }, 'front-end thread failed; restarting it')
  if (failed) return
  failed = true
  try { server?.abort() } catch {}
  // uWS finishes closing its sockets on the next loop turns: exit once the rest is closed too.
  void close().catch(() => {}).finally(() => process.exit(1))
})
const post = (m: ToMain): void => parentPort!.postMessage(m)
const shards = new ShardClient(init.shards)
const sql: Sql = connect(init.databaseUrl, { max: 4, stallMs: config.dbStallTimeoutMs })
const probeSql = connect(init.databaseUrl, { max: 1, stallMs: config.dbStallTimeoutMs })
const dbHealth = new DbHealth(() => ping(probeSql), 250, (up) => log.warn(up ? 'database reachable again' : 'database unreachable'))
const jobs = new JobCache(config.jobCacheMb * 1024 * 1024)
const sse = new SseHub(config.sseHeartbeatMs, new SharedStreamCounts(init.limits.streams))
jobs.onUpdate((_a, view) => sse.publish(view))
// AUTH_CACHE_MB, as on the main thread: 3/4 of it for this thread's credential caches.
const auth = new Authenticator(sql, init.jwtSecret, init.adminToken, 5000, Math.floor(config.authCacheMb * 1024 * 1024 * 3 / 4))
const metrics = new Metrics()
const metering = new ThreadedMetering(sql, log, auth.lastUsed, config.meteringRetentionDays)
const redis = config.redisUrl ? new Redis(config.redisUrl, { maxRetriesPerRequest: 2 }) : null
redis?.on('error', (err) => log.warn({ err: String(err) }, 'redis error'))

const rpc: Rpc<MainCalls, FrontendCalls> = new Rpc<MainCalls, FrontendCalls>(post, {
  stats: async () => metrics.stats(sse.size),
  'metering.flush': async (r) => { await metering.localFlush(r.accountId); return null },
  close: async () => { await close(); return null },
  crash: async () => { setImmediate(() => { throw new RequestedCrash('front-end crash requested (test hook)') }); return null },
})
metrics.delegate = () => rpc.call('metrics.scrape', {})
metering.peers = async (accountId) => { await rpc.call('metering.flush', { accountId }) }

const bus = new ThreadBus(init.bus, (m) => {
  if (m.t === 'job') jobs.update(m.a, m.j)
  else if (m.t === 'prog') jobs.progress(m.a, m.p)
  else if (m.t === 'drop') jobs.dropActive(a => a % m.n === m.shard)
  else if (m.k === 'key') auth.invalidateKey(m.id, false)
  else auth.invalidateAccount(Number(m.id), false)
})
auth.onInvalidate = (k, id) => bus.post({ t: 'inv', k, id })

/** The one login throttle of the node lives on the main thread (or in Redis). */
const loginThrottle: LoginThrottle = redis ? new RedisLoginThrottle(redis, config.redisPrefix) : {
  check: (email, ip) => rpc.call('login.check', { email, ip }),
  failed: async (email, ip) => { await rpc.call('login.failed', { email, ip }) },
  succeeded: async (email) => { await rpc.call('login.succeeded', { email }) },
}
const signupThrottle: SignupThrottle = redis ? new RedisSignupThrottle(redis, config.redisPrefix) : { take: (ip) => rpc.call('signup.take', { ip }) }

parentPort!.on('message', (m: ToFrontend) => {
  if (m.t === 'shard') shards.attach(m.shard, m.port)
  else rpc.receive(m)
})

const storage = await createStorage(config)
const services: Services = {
  providers: await Providers.load(config, storage, init.shards),
  config,
  sql,
  dbHealth,
  shards,
  auth,
  passwords: {
    hash: (password) => rpc.call('password.hash', { password }),
    verify: (password, hash) => rpc.call('password.verify', { password, hash }),
  },
  imageScreen: { screen: (task) => rpc.call('image.screen', task) },
  jwtSecret: init.jwtSecret,
  log,
  metering,
  limiter: new SharedRateLimiter(init.limits.rate),
  storage,
  jobs,
  sse,
  bus: null,
  redisLimiter: redis ? new RedisRateLimiter(redis, config.redisPrefix) : null,
  loginThrottle,
  signupThrottle,
  callbackRefusals: new MemoryWindow(CALLBACK_REFUSALS_PER_MINUTE, 60_000),
  nodeId: init.nodeId,
  tickets: new Tickets(init.jwtSecret),
  metrics,
  version: init.version,
}

let doc: unknown = null
const routes = allRoutes(() => doc)
doc = Object.freeze(buildOpenApi(routes, { version: init.version, serverUrl: config.publicBaseUrl }))
server = new HttpServer(services, routes)
await server.listen(init.host, init.port)
post({ t: 'ready' })

let closing: Promise<void> | null = null
function close (): Promise<void> {
  return (closing ??= (async () => {
    sse.close()
    await server?.close()
    bus.close()
    await shards.close()
    await metering.close()
    storage.close?.()
    dbHealth.close()
    redis?.disconnect()
    await probeSql.end({ timeout: 1 })
    await sql.end({ timeout: 5 })
  })())
}
