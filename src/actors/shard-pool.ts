import { ApiError, errorFromWire } from '../errors.js'
import type { Config } from '../config.js'
import { BatchedPort } from './port.js'
import { ManagedWorker } from './worker-lifecycle.js'
import type { Batch, ShardEvent, ShardInit, ShardMsg, ShardReply, ShardRequests, ShardTag } from './protocol.js'

interface Pending { resolve: (v: ShardReply) => void; reject: (e: Error) => void; deadline: number; shard: number }

interface Slot { worker: ManagedWorker<Batch>; port: BatchedPort }

export interface ShardPoolOptions {
  shards: number
  databaseUrl: string
  config: Config
  nodeId: string
  /** Default ask timeout. */
  timeoutMs?: number
  onEvent?: (ev: ShardEvent) => void
  /** A shard was restarted after a crash (its actors reload from PostgreSQL). */
  onRestart?: (shard: number, shards: number) => void
  onLog?: (level: 'warn' | 'error', msg: string) => void
}

/**
 * The main thread's handle on the shard workers (DESIGN.md section 2). Account `a` lives on
 * shard `a mod N`. `ask` pairs a request with its reply; a dead worker's pending asks fail
 * with INTERNAL_ERROR and the worker is restarted (its actors recover from PostgreSQL).
 */
export class ShardPool {
  private readonly slots: Slot[] = []
  private readonly pending = new Map<number, Pending>()
  private nextId = 1
  private closing = false
  private readonly sweep: NodeJS.Timeout
  readonly size: number

  constructor (private readonly opts: ShardPoolOptions) {
    this.size = opts.shards
    for (let i = 0; i < opts.shards; i++) this.slots.push(this.spawn(i))
    // One timer for every ask's deadline instead of a timer per ask.
    this.sweep = setInterval(() => this.expire(), 200)
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
    const id = this.nextId++
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, deadline: Date.now() + timeoutMs, shard })
      this.slots[shard].port.request({ id, msg: msg as ShardMsg })
    })
  }

  private spawn (shard: number): Slot {
    const init: ShardInit = { shard, shards: this.opts.shards, databaseUrl: this.opts.databaseUrl, config: this.opts.config, nodeId: this.opts.nodeId }
    const worker = new ManagedWorker<Batch>({
      url: new URL('./shard-worker.js', import.meta.url),
      data: () => init,
      name: `shard ${shard}`,
      onMessage: (b, ready) => {
        if (b.rep) {
          for (const r of b.rep) {
            const p = this.pending.get(r.id)
            if (!p) continue
            this.pending.delete(r.id)
            if (r.ok) p.resolve(r.value)
            else p.reject(errorFromWire(r.code, r.message, r.extra))
          }
        }
        if (b.ev) {
          for (const ev of b.ev) {
            if (ev.type === 'shard.ready') ready()
            else this.opts.onEvent?.(ev)
          }
        }
      },
      onExit: () => this.failPending(shard, `shard ${shard} exited`),
      onRestart: () => this.opts.onRestart?.(shard, this.size),
      onLog: this.opts.onLog,
    })
    return { worker, port: new BatchedPort({ postMessage: (v) => worker.post(v) }) }
  }

  private failPending (shard: number, why: string): void {
    for (const [id, p] of this.pending) {
      if (p.shard !== shard) continue
      this.pending.delete(id)
      p.reject(new ApiError('INTERNAL_ERROR', `Internal error (${why}); safe to retry with the same Idempotency-Key`))
    }
  }

  private expire (): void {
    const now = Date.now()
    for (const [id, p] of this.pending) {
      if (p.deadline > now) continue
      this.pending.delete(id)
      p.reject(new ApiError('INTERNAL_ERROR', 'Internal error (shard did not answer in time); safe to retry'))
    }
  }

  /** Every shard's measurements for /metrics (src/metrics.ts); a shard that does not answer in 1 s is left out. */
  async stats (): Promise<Array<ShardRequests['shard.stats']['res']>> {
    const all = await Promise.all(this.slots.map((_, i) => this.askShard(i, { type: 'shard.stats' }, 1000).catch(() => null)))
    return all.filter((s): s is ShardRequests['shard.stats']['res'] => s !== null)
  }

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
    for (let i = 0; i < this.slots.length; i++) this.failPending(i, 'shutting down')
  }
}
