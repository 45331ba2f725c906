import { ApiError } from '../errors.js'
import type { Config } from '../config.js'
import { ManagedWorker } from '../threads/worker-lifecycle.js'
import type { ReqOf } from '../threads/channel.js'
import type { MessagePort, ResourceLimits } from 'node:worker_threads'
import type { SharedProviderState } from '../providers/capacity.js'
import type { RouteState } from '../providers/registry.js'
import type { ClaimedDelivery } from '../db/webhooks.js'
import type { FromShard, ShardEvent, ShardInit, ShardRequests, ShardTag, ToShard } from './protocol.js'

/**
 * A shard's young generation may grow to 96 MB (32 MB semi-spaces, twice V8's default): a job's
 * objects live for its whole run (creation to callback, a few hundred ms under load), and with
 * more room they die young instead of being promoted and marked (docs/decisions.md "Shards
 * keep a larger young generation").
 */
export const SHARD_YOUNG_GENERATION_MB = 96

/** What route handlers use of the shards: the pool on the main thread, a ShardClient on other front-end threads. */
export interface Shards {
  readonly size: number
  readonly restarts: number
  ready (): Promise<void>
  shardOf (accountId: number): number
  ask<K extends ShardTag> (accountId: number, msg: { type: K } & ShardRequests[K]['req'], timeoutMs?: number): Promise<ShardRequests[K]['res']>
  askShard<K extends ShardTag> (shard: number, msg: { type: K } & ShardRequests[K]['req'], timeoutMs?: number): Promise<ShardRequests[K]['res']>
  stats (): Promise<Array<ShardRequests['shard.stats']['res']>>
  crash (shard: number): Promise<void>
  close (): Promise<void>
}

export interface ShardPoolOptions {
  shards: number
  databaseUrl: string
  config: Config
  nodeId: string
  /** Shared upstream capacity and budgets (src/providers/capacity.ts), kept across shard restarts. */
  providerState?: SharedProviderState
  /** Default ask timeout. */
  timeoutMs?: number
  onEvent?: (ev: ShardEvent) => void
  /**
   * This node's delivery pool takes the outbox rows of the shards' completions in memory
   * (DeliveryPool.hand): the shards insert them claimed for this node and pass them here once
   * committed. Without it they are left unclaimed for any node's pool.
   */
  onDeliveries?: (rows: ClaimedDelivery[]) => void
  /** A shard was restarted after a crash (its actors reload from PostgreSQL). */
  onRestart?: (shard: number, shards: number) => void
  onLog?: (level: 'warn' | 'error', msg: string) => void
}

/**
 * The main thread's handle on the shard workers (docs/architecture.md "Threads"). Account `a` lives on
 * shard `a mod N`. Each shard is a ManagedWorker with its channel: `ask` pairs a request with
 * its reply; a dead worker's pending asks fail with INTERNAL_ERROR and the worker is restarted
 * (its actors recover from PostgreSQL).
 */
export class ShardPool implements Shards {
  private readonly workers: Array<ManagedWorker<ToShard, FromShard>> = []
  private closing = false
  readonly size: number

  constructor (private readonly opts: ShardPoolOptions) {
    this.size = opts.shards
    for (let i = 0; i < this.size; i++) this.workers.push(this.spawn(i))
  }

  /** Resolves when every shard has loaded and connected. */
  async ready (): Promise<void> { await Promise.all(this.workers.map(w => w.ready)) }

  /** Restarts so far (observability and tests). */
  get restarts (): number { return this.workers.reduce((n, w) => n + w.restarts, 0) }

  shardOf (accountId: number): number { return accountId % this.size }

  ask<K extends ShardTag> (accountId: number, msg: { type: K } & ShardRequests[K]['req'], timeoutMs?: number): Promise<ShardRequests[K]['res']> {
    return this.askShard(this.shardOf(accountId), msg, timeoutMs)
  }

  askShard<K extends ShardTag> (shard: number, msg: { type: K } & ShardRequests[K]['req'], timeoutMs?: number): Promise<ShardRequests[K]['res']> {
    if (this.closing) return Promise.reject(new ApiError('SERVICE_UNAVAILABLE', 'Service is shutting down'))
    return this.workers[shard].channel.ask(msg.type, msg as ReqOf<ToShard, K>, timeoutMs) as Promise<ShardRequests[K]['res']>
  }

  private spawn (shard: number): ManagedWorker<ToShard, FromShard> {
    const init: ShardInit = {
      shard, shards: this.opts.shards, databaseUrl: this.opts.databaseUrl, config: this.opts.config, nodeId: this.opts.nodeId,
      providerState: this.opts.providerState, handDeliveries: this.opts.onDeliveries !== undefined,
    }
    return new ManagedWorker<ToShard, FromShard>({
      url: new URL('./shard-worker.js', import.meta.url),
      data: () => init,
      name: `shard ${shard}`,
      handlers: {},
      timeoutMs: this.opts.timeoutMs ?? 10_000,
      youngGenerationMb: SHARD_YOUNG_GENERATION_MB,
      onTell: (m) => {
        if (m.tag === 'deliveries') this.opts.onDeliveries?.(m.body.rows)
        else this.opts.onEvent?.(m.body)
      },
      onRestart: () => this.opts.onRestart?.(shard, this.size),
      onLog: this.opts.onLog,
    })
  }

  /** Every shard's measurements for /metrics (src/metrics.ts); a shard that does not answer in 1 s is left out. */
  async stats (): Promise<Array<ShardRequests['shard.stats']['res']>> {
    const all = await Promise.all(this.workers.map((_, i) => this.askShard(i, { type: 'shard.stats' }, 1000).catch(() => null)))
    return all.filter((s): s is ShardRequests['shard.stats']['res'] => s !== null)
  }

  /** Hands `port` to shard `shard` (a front-end thread's channel to it; src/http/front-ends/pool.ts). */
  attach (shard: number, port: MessagePort): void { this.workers[shard].channel.tell('attach', { port }, [port]) }

  /** Test hook: kills one worker as a crash would. */
  async crash (shard: number): Promise<void> { await this.workers[shard].crash() }

  /** The V8 limits shard `shard`'s current thread runs with (operators' checks and tests). */
  resourceLimits (shard: number): ResourceLimits { return this.workers[shard].worker.resourceLimits ?? {} }

  async close (): Promise<void> {
    // Each shard finishes its group commit (shard.ping answers after it) before it is stopped.
    await Promise.all(this.workers.map(async (w, i) => {
      await w.close(() => this.askShard(i, { type: 'shard.ping' }, 5000), 5000)
    }))
    this.closing = true
  }
}

/**
 * The operator's route view of this node (docs/providers.md "Routing", Operators): each
 * route of PROVIDERS_FILE with its breaker, in-flight and queued jobs summed over the shards.
 * Shown by `GET /v1/admin/providers` and /metrics only; the public health never lists routes,
 * providers or upstream models. Empty without a routing file (every model simulated).
 */
export async function nodeRouteStates (shards: Shards, providersFile: string | undefined): Promise<RouteState[]> {
  if (!providersFile) return []
  const per = await Promise.all(Array.from({ length: shards.size }, (_, i) => shards.askShard(i, { type: 'shard.routes' }, 2000).catch(() => [] as RouteState[])))
  const byRoute = new Map<string, RouteState>()
  for (const list of per) {
    for (const r of list) {
      const a = byRoute.get(r.route)
      if (!a) { byRoute.set(r.route, { ...r }); continue }
      a.in_flight += r.in_flight
      a.queued += r.queued
      if (r.breaker === 'open') a.breaker = 'open'
    }
  }
  return [...byRoute.values()]
}
