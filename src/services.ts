import type { Logger } from 'pino'
import type { Config } from './config.js'
import type { DbHealth, Sql } from './db/connect.js'
import type { LoginThrottle } from './http/login-throttle.js'
import type { MemoryWindow, SignupThrottle } from './http/address-window.js'
import type { Shards } from './shard/shard-pool.js'
import type { Authenticator } from './http/auth.js'
import type { Limiter } from './http/front-ends/shared-limits.js'
import type { Passwords } from './util/passwords.js'
import type { ImageScreen } from './media/screen.js'
import type { Metering } from './metering.js'
import type { Storage } from './storage/storage.js'
import type { JobCache } from './jobs/cache.js'
import type { SseHub } from './http/sse.js'
import type { Tickets } from './http/tickets.js'
import type { RedisBus } from './redis.js'
import type { Providers } from './providers/registry.js'
import type { RedisRateLimiter } from './http/rate-limit-redis.js'
import type { Metrics } from './metrics.js'

/** What route handlers can use: one per front end, built by src/http/front-end.ts (docs/architecture.md "Threads"). */
export interface Services {
  config: Config
  /** The main thread's pool (reads, key management, operator writes that bypass actors). */
  sql: Sql
  /** Whether PostgreSQL answers, as this thread sees it: bounds request waits during an outage. */
  dbHealth: DbHealth
  shards: Shards
  auth: Authenticator
  passwords: Pick<Passwords, 'hash' | 'verify'>
  /** The upload content screen's thread (one per node, on the main thread). */
  imageScreen: Pick<ImageScreen, 'screen'>
  jwtSecret: string
  log: Logger
  metering: Metering
  limiter: Limiter
  /** Views of recent and live jobs, fed by shard events. */
  jobs: JobCache
  /** Cross-node bus and shared rate window (only with REDIS_URL). */
  bus: RedisBus | null
  redisLimiter: RedisRateLimiter | null
  /** Failed-login counts per account and address: Redis with REDIS_URL, else memory. */
  loginThrottle: LoginThrottle
  /** Signups per client address (Redis with REDIS_URL, else the main thread's). */
  signupThrottle: SignupThrottle
  /** Refused provider callbacks per client address, in this thread (src/http/routes/providers.ts). */
  callbackRefusals: MemoryWindow
  /** This node's id (NODE_ID, else kept in DATA_DIR/node-id). */
  nodeId: string
  /** Open SSE streams of this node. */
  sse: SseHub
  /** SSE ticket signing (HMAC, valid on any node sharing JWT_SECRET). */
  tickets: Tickets
  /** Media storage (results, uploads). */
  storage: Storage
  /** Prometheus registry and hooks (GET /metrics). */
  metrics: Metrics
  /** The routing and adapters, in the main thread: callbacks are verified here. */
  providers: Providers
  /** Set by this thread's front end when it starts to drain (src/http/server.ts close()). */
  closing?: boolean
  /** Version string of this build (package.json). */
  version: string
}
