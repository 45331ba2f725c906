import type { ScreenResult, ScreenTask } from '../../media/screen-task.js'
import type { MessagePort } from 'node:worker_threads'
import type { Config } from '../../config.js'
import type { JobProgress, JobView } from '../../jobs/view.js'
import type { HistSnap } from '../../worker-stats.js'
import type { SharedLimitsInit } from './shared-limits.js'

/**
 * Messages between the main thread and the other front-end threads (docs/decisions.md
 * "Front-end threads"), typed both ways like src/shard/protocol.ts.
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
  /** Test hook: the thread fails with an uncaught exception (src/http/front-ends/worker.ts closes its sockets and exits; it is restarted). */
  'crash': { req: Record<never, never>; res: null }
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

export type Call<C> = { [K in keyof C & string]: { t: 'call'; id: number; op: K; req: C[K] extends { req: infer R } ? R : never } }[keyof C & string]
export type Reply = { t: 'reply'; id: number; ok: true; value: unknown } | { t: 'reply'; id: number; ok: false; code: string; message: string }

/** Main -> front end. */
export type ToFrontend =
  | Call<FrontendCalls>
  | Reply
  /** The channel to shard `shard` (at start, and again after that shard restarted). */
  | { t: 'shard'; shard: number; port: MessagePort }

/** Front end -> main. */
export type ToMain =
  | Call<MainCalls>
  | Reply
  | { t: 'ready' }

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
