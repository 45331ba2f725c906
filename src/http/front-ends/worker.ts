import { parentPort, workerData } from 'node:worker_threads'
import { Redis } from 'ioredis'
import { createLogger } from '../../log.js'
import { connect, isDbUnavailable, isDriverFault, type Sql } from '../../db/connect.js'
import { Metrics } from '../../metrics.js'
import { containEscaped } from '../../escaped.js'
import { Channel } from '../../threads/channel.js'
import { ShardClient } from '../../shard/shard-client.js'
import { buildFrontEnd, type FrontEnd } from '../front-end.js'
import { ThreadedMetering } from './metering.js'
import type { FrontendInit, ToFrontend, ToMain } from './protocol.js'

/**
 * A front-end thread other than the main one (docs/decisions.md "Front-end threads"): the front
 * end of src/http/front-end.ts on the shared port (SO_REUSEPORT), its own caches and pools,
 * the shards reached through its own ports, the exact counters in shared memory; the password
 * pool, the image screen, the login throttle and /metrics are asked of the main thread.
 */
const init = workerData as FrontendInit
const config = init.config
const log = createLogger(config.logLevel, { base: { frontend: init.index }, secrets: [init.adminToken, init.jwtSecret, config.metricsToken ?? ''] })

let front: FrontEnd | null = null
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
  try { front?.abort() } catch {}
  // uWS finishes closing its sockets on the next loop turns: exit once the rest is closed too.
  void close().catch(() => {}).finally(() => process.exit(1))
})

const shards = new ShardClient(init.shards)
const metrics = new Metrics()
const main = Channel.over<ToMain, ToFrontend>(parentPort!, {
  peer: 'main thread',
  // A password hash waits its turn in the main thread's scrypt pool.
  timeoutMs: 30_000,
  handlers: {
    stats: async () => metrics.stats(front?.services.sse.size ?? 0),
    // This thread's rows only: the thread that asked flushes the others.
    'metering.flush': async (r) => {
      const m = front?.services.metering
      if (m instanceof ThreadedMetering) await m.localFlush(r.accountId)
      return null
    },
    close: async () => { await close(); return null },
  },
  onTell: (m) => {
    if (m.tag === 'shard') shards.attach(m.body.shard, m.body.port)
    else if (m.tag === 'crash') setImmediate(() => { throw new RequestedCrash('front-end crash requested (test hook)') })
  },
})
metrics.delegate = () => main.ask('metrics.scrape', {})

const sql: Sql = connect(init.databaseUrl, { max: 4, stallMs: config.dbStallTimeoutMs })
const redis = config.redisUrl ? new Redis(config.redisUrl, { maxRetriesPerRequest: 2 }) : null
redis?.on('error', (err) => log.warn({ err: String(err) }, 'redis error'))

front = await buildFrontEnd({
  config,
  log,
  sql,
  databaseUrl: init.databaseUrl,
  jwtSecret: init.jwtSecret,
  adminToken: init.adminToken,
  nodeId: init.nodeId,
  version: init.version,
  shards,
  metrics,
  limits: init.limits,
  threadBus: init.bus,
  meteringPeers: async (accountId) => { await main.ask('metering.flush', { accountId }) },
  passwords: {
    hash: (password) => main.ask('password.hash', { password }),
    verify: (password, hash) => main.ask('password.verify', { password, hash }),
  },
  imageScreen: { screen: (task) => main.ask('image.screen', task) },
  // The one login throttle and signup window of the node live on the main thread (or in Redis).
  loginThrottle: {
    check: (email, ip) => main.ask('login.check', { email, ip }),
    failed: async (email, ip) => { await main.ask('login.failed', { email, ip }) },
    succeeded: async (email) => { await main.ask('login.succeeded', { email }) },
  },
  signupThrottle: { take: (ip) => main.ask('signup.take', { ip }) },
  redis,
  bus: null,
})
await front.listen(init.host, init.port)
main.tell('ready', {})

let closing: Promise<void> | null = null
function close (): Promise<void> {
  return (closing ??= (async () => {
    await front?.close()
    await shards.close()
    redis?.disconnect()
    await sql.end({ timeout: 5 })
  })())
}
