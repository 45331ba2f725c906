import type { MessagePort } from 'node:worker_threads'
import type { Config } from '../config.js'
import type { JobProgress, JobView } from '../jobs/view.js'
import type { UpstreamState } from '../providers/upstream.js'
import type { RouteState } from '../providers/registry.js'
import type { SharedProviderState } from '../providers/capacity.js'
import type { ClaimedDelivery } from '../db/webhooks.js'
import type { AccountView, BatchItemView, BatchView, CreatedJobView, JobCaller, JobOrder } from '../domain.js'

/**
 * The shard boundary (docs/architecture.md "Messages between threads"): what the main thread
 * and the front-end threads ask a shard (`ToShard`), and what a shard tells the main thread
 * (`FromShard`). Only plain data crosses; it crosses on a src/threads/channel.ts Channel.
 */

export type { AccountView, BatchItemView, BatchView, CreatedJobView, CreditKind, JobCaller, JobOrder, JobSpec } from '../domain.js'

/** Requests from the main thread to a shard, keyed by tag, with their reply types. */
export interface ShardRequests {
  /** Balance and flags, loaded from PostgreSQL on first use. */
  'account.get': { req: { accountId: number }; res: AccountView }
  /** Adds credits (grant, purchase or adjustment) through the group commit. */
  'account.credit': {
    req: { accountId: number; credits: number; kind: 'grant' | 'purchase' | 'adjustment'; note?: string; currency?: string; amount?: number }
    res: AccountView
  }
  /** Drops the cached state so the next use reloads it (after an operator PATCH). */
  'account.reload': { req: { accountId: number }; res: AccountView }
  /** Creates a job: checks, charge, provider submission, commit (docs/architecture.md "Creating a job"). */
  'job.create': {
    req: JobCaller & { spec: JobOrder; idempotencyKey?: string; fingerprint?: string }
    res: { created: CreatedJobView; replayed: boolean }
  }
  /** DELETE /jobs/{id}: queued -> cancelled with a full refund, else CANNOT_CANCEL. */
  'job.cancel': { req: { accountId: number; jobId: string }; res: JobView }
  /** POST /batch: items priced, charged and submitted in order (docs/api.md "Batch (paid plans)"). */
  'batch.create': {
    req: JobCaller & { items: Array<{ index: number; type: 'video' | 'image' | null; spec?: JobOrder; error?: BatchItemView['error'] & { status: number } }>; idempotencyKey?: string; fingerprint?: string }
    res: BatchView
  }
  /** A content-policy hit: counts it and suspends the account at the threshold. */
  'account.violation': { req: { accountId: number }; res: { violations: number; banned: boolean } }
  /**
   * A verified provider callback for a job of this account: `state` when the callback is
   * signed over its body, else absent (a hint: the job polls now). `upstream`: an id no job
   * holds that the callback URL names for this job (a lost submission or a duplicate).
   * `upstreamId`: the front end took job and account from the callback URL without reading the
   * database; the shard answers 'unmatched' unless it runs that job holding that upstream id
   * (docs/providers.md "Callbacks").
   */
  'job.callback': { req: { accountId: number; jobId: string; state?: UpstreamState; upstream?: { provider: string; id: string }; upstreamId?: string }; res: 'live' | 'settled' | 'ignored' | 'unmatched' }
  /** Each configured route's breaker, in-flight and queued counts on this shard (GET /v1/health). */
  'shard.routes': { req: Record<never, never>; res: RouteState[] }
  /** Test and ops probe: answers after the shard's pending group commit is durable. */
  'shard.ping': { req: Record<never, never>; res: { shard: number; actors: number } }
  /** Metrics scrape (src/metrics.ts): this shard's worker-side measurements. */
  'shard.stats': { req: Record<never, never>; res: import('../worker-stats.js').StatsSnapshot }
}

export type ShardTag = keyof ShardRequests
/** A request as it crosses: its tag in `type`, so one union covers them all. */
export type ShardMsg = { [K in ShardTag]: { type: K } & ShardRequests[K]['req'] }[ShardTag]

/** Events a shard pushes to the main thread unasked. */
export type ShardEvent =
  /** Every persisted change of a job (status, progress, terminal): feeds the read cache and SSE. */
  | { type: 'job.updated'; accountId: number; job: JobView }
  /**
   * A non-terminal change of a job whose full view was sent before: only
   * status, progress and updated_at; the main thread patches it into its cached view.
   */
  | ({ type: 'job.progress'; accountId: number } & JobProgress)

/** What a front end (main thread or another front-end thread) sends a shard. */
export interface ToShard {
  asks: { [K in ShardTag]: { req: { type: K } & ShardRequests[K]['req']; res: ShardRequests[K]['res'] } }
  tells: {
    /** From the main thread: a front-end thread's own channel to this shard (src/http/front-ends/pool.ts). */
    attach: { port: MessagePort }
  }
}

/** What a shard sends: events, to the main thread only (it asks nothing). */
export interface FromShard {
  asks: Record<never, never>
  tells: {
    ready: Record<never, never>
    'job.updated': Extract<ShardEvent, { type: 'job.updated' }>
    'job.progress': Extract<ShardEvent, { type: 'job.progress' }>
    /** Outbox rows just committed claimed for this node: for its delivery pool (ShardInit.handDeliveries). */
    deliveries: { rows: ClaimedDelivery[] }
  }
}

/** What a shard worker is started with. */
export interface ShardInit {
  shard: number
  shards: number
  databaseUrl: string
  config: Config
  /** This node's id: owner of the job leases its shards take. */
  nodeId: string
  /** Upstream capacity and request budgets every shard of the node counts in (src/providers/capacity.ts). */
  providerState?: SharedProviderState
  /**
   * Completions insert their outbox rows claimed for this node and tell them to the main
   * thread (`deliveries`) for its delivery pool (docs/architecture.md "Durability", the outbox).
   */
  handDeliveries?: boolean
}
