import type { ScreenResult, ScreenTask } from '../../media/screen-task.js'
import type { MessagePort } from 'node:worker_threads'
import type { Config } from '../../config.js'
import type { JobProgress, JobView } from '../../jobs/view.js'
import type { HistSnap } from '../../worker-stats.js'
import type { SharedLimitsInit } from './shared-limits.js'

/**
 * The front-end thread boundary (docs/architecture.md "Messages between threads"): what the
 * main thread sends a front-end thread (`ToFrontend`) and what it sends back (`ToMain`), on a
 * src/threads/channel.ts Channel; and the thread bus's messages (src/threads/bus.ts).
 */

/** What a front-end thread asks the main thread (one shared password pool, one login throttle, one /metrics). */
export interface MainCalls {
  'password.hash': { req: { password: string }; res: string }
  'password.verify': { req: { password: string; hash: string }; res: boolean }
  'image.screen': { req: ScreenTask; res: ScreenResult }
  'login.check': { req: { email: string; ip: string }; res: number }
  'login.failed': { req: { email: string; ip: string }; res: null }
  'login.succeeded': { req: { email: string }; res: null }
  'signup.take': { req: { ip: string }; res: number }
  /** Flush every thread's metering buffer (all rows, or one account's): src/http/front-ends/metering.ts. */
  'metering.flush': { req: { accountId: number | null }; res: null }
  /** The exposition text of the whole process (every thread summed). */
  'metrics.scrape': { req: Record<never, never>; res: string }
}

/** What the main thread asks a front-end thread. */
export interface FrontendCalls {
  /** Its share of the per-request metrics, summed into /metrics. */
  'stats': { req: Record<never, never>; res: FrontendStats }
  /** This thread's metering rows (all, or one account's) written. */
  'metering.flush': { req: { accountId: number | null }; res: null }
  /** Graceful stop: stop accepting, drain requests, end SSE streams, flush metering. */
  'close': { req: Record<never, never>; res: null }
}

export interface FrontendStats {
  requests: Array<[route: string, method: string, status: number, n: number]>
  durations: Array<[route: string, h: HistSnap]>
  created: Array<[type: string, model: string, n: number]>
  refusals: Array<[code: string, n: number]>
  sseOpen: number
  /** Errors contained in this thread (src/escaped.ts). */
  escaped: number
}

/** Main thread -> front-end thread. */
export interface ToFrontend {
  asks: FrontendCalls
  tells: {
    /** The channel to shard `shard` (at start, and again after that shard restarted). */
    shard: { shard: number; port: MessagePort }
    /** Test hook: the thread fails with an uncaught exception (src/http/front-ends/worker.ts closes its sockets and exits; it is restarted). */
    crash: Record<never, never>
  }
}

/** Front-end thread -> main thread. */
export interface ToMain {
  asks: MainCalls
  tells: { ready: Record<never, never> }
}

/** What a front-end thread is started with. */
export interface FrontendInit {
  index: number
  config: Config
  databaseUrl: string
  nodeId: string
  jwtSecret: string
  adminToken: string
  version: string
  host: string
  port: number
  shards: number
  limits: SharedLimitsInit
  /** BroadcastChannel name of this process's thread bus (src/threads/bus.ts). */
  bus: string
}

/** The thread bus: what src/redis.ts carries between nodes, between the threads of one node. */
export type ThreadMessage =
  | { t: 'job'; a: number; j: JobView }
  /** A non-terminal change of a job whose full view was posted before (JobCache.progress). */
  | { t: 'prog'; a: number; p: JobProgress }
  | { t: 'inv'; k: 'key' | 'account'; id: string }
  /** Shard `shard` of `n` restarted: forget live views of its accounts. */
  | { t: 'drop'; shard: number; n: number }
