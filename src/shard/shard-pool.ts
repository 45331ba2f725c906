import { ApiError } from '../errors.js'
import { PendingAsks } from '../threads/pending-asks.js'
import type { Config } from '../config.js'
import { BatchedPort } from '../threads/port.js'
import { ManagedWorker } from '../threads/worker-lifecycle.js'
import type { MessagePort } from 'node:worker_threads'
import type { SharedProviderState } from '../providers/capacity.js'
import type { Batch, ShardAttach, ShardEvent, ShardInit, ShardMsg, ShardRequests, ShardTag } from './protocol.js'


interface Slot { worker: ManagedWorker<Batch>; port: BatchedPort }

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
  /** A shard was restarted after a crash (its actors reload from PostgreSQL). */
  onRestart?: (shard: number, shards: number) => void
  onLog?: (level: 'warn' | 'error', msg: string) => void
}

/**
 * The main thread's handle on the shard workers (docs/architecture.md "Threads"). Account `a` lives on
 * shard `a mod N`. `ask` pairs a request with its reply; a dead worker's pending asks fail
 * with INTERNAL_ERROR and the worker is restarted (its actors recover from PostgreSQL).
 */
export class ShardPool implements Shards {
  private readonly slots: Slot[] = []
  private readonly pending = new PendingAsks()
  private closing = false
  private readonly sweep: NodeJS.Timeout
  readonly size: number

  constructor (private readonly opts: ShardPoolOptions) {
    this.size = opts.shards
    for (let i = 0; i < opts.shards; i++) this.slots.push(this.spawn(i))
    // One timer for every ask's deadline instead of a timer per ask.
    this.sweep = setInterval(() => this.pending.expire(), 200)
    this.sweep.unref()
  }

  /** Resolves when every shard has loaded and connected. */
  async ready (): Promise<void> { await Promise.all(this.slots.map(s => s.worker.ready)) }

  /** Restarts so far (observability and tests). */
  get restarts (): number { return this.slots.reduce((n, s) => n + s.worker.restarts, 0) }

  shardOf (accountId: number): number { return accountId % this.size }

  ask<K extends ShardTag> (accountId: number, msg: { type: K } & ShardRequests[K]['req'], timeoutMs?: number): Promise<ShardRequests[K]['res']> {
    return this.askShard(this.shardOf(accountId), msg, timeoutMs)
  }

  askShard<K extends ShardTag> (shard: number, msg: { type: K } & ShardRequests[K]['req'], timeoutMs = this.opts.timeoutMs ?? 10000): Promise<ShardRequests[K]['res']> {
    if (this.closing) return Promise.reject(new ApiError('SERVICE_UNAVAILABLE', 'Service is shutting down'))
    return new Promise((resolve, reject) => {
      const id = this.pending.add(shard, timeoutMs, resolve, reject)
      this.slots[shard].port.request({ id, msg: msg as ShardMsg })
    })
  }

  private spawn (shard: number): Slot {
    const init: ShardInit = {
      shard, shards: this.opts.shards, databaseUrl: this.opts.databaseUrl, config: this.opts.config, nodeId: this.opts.nodeId,
      providerState: this.opts.providerState,
    }
    const worker = new ManagedWorker<Batch>({
      url: new URL('./shard-worker.js', import.meta.url),
      data: () => init,
      name: `shard ${shard}`,
      onMessage: (b, ready) => {
        if (b.rep) this.pending.settle(b.rep)
        if (b.ev) {
          for (const ev of b.ev) {
            if (ev.type === 'shard.ready') ready()
            else this.opts.onEvent?.(ev)
          }
        }
      },
      onExit: () => this.pending.failShard(shard, `shard ${shard} exited`),
      onRestart: () => this.opts.onRestart?.(shard, this.size),
      onLog: this.opts.onLog,
    })
    return { worker, port: new BatchedPort({ postMessage: (v) => worker.post(v) }) }
  }

  /** Every shard's measurements for /metrics (src/metrics.ts); a shard that does not answer in 1 s is left out. */
  async stats (): Promise<Array<ShardRequests['shard.stats']['res']>> {
    const all = await Promise.all(this.slots.map((_, i) => this.askShard(i, { type: 'shard.stats' }, 1000).catch(() => null)))
    return all.filter((s): s is ShardRequests['shard.stats']['res'] => s !== null)
  }

  /** Hands `port` to shard `shard` (a front-end thread's channel to it; src/http/front-ends/pool.ts). */
  attach (shard: number, port: MessagePort): void { this.slots[shard].worker.worker.postMessage({ attach: port } satisfies ShardAttach, [port]) }

  /** Test hook: kills one worker as a crash would. */
  async crash (shard: number): Promise<void> { await this.slots[shard].worker.crash() }

  async close (): Promise<void> {
    // Each shard finishes its group commit (shard.ping answers after it) before it is stopped.
    const drain = (i: number) => () => this.askShard(i, { type: 'shard.ping' }, 5000)
    await Promise.all(this.slots.map(async (s, i) => {
      await s.worker.close(async () => { await drain(i)(); s.port.flush() }, 5000)
    }))
    this.closing = true
    clearInterval(this.sweep)
    for (let i = 0; i < this.slots.length; i++) this.pending.failShard(i, 'shutting down')
  }
}
