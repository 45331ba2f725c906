import type { MessagePort } from 'node:worker_threads'
import { ApiError } from '../errors.js'
import { PendingAsks } from '../threads/pending-asks.js'
import { BatchedPort } from '../threads/port.js'
import type { Shards } from './shard-pool.js'
import type { Batch, ShardMsg, ShardRequests, ShardTag } from './protocol.js'


/**
 * A front-end thread's handle on the shards (docs/decisions.md "Front-end threads"): one
 * MessagePort per shard, handed over by the main thread, so asks go straight to the shard and
 * replies come straight back. When a shard restarts the main thread sends a new port; what was
 * pending on the old one fails with INTERNAL_ERROR, as in ShardPool.
 */
export class ShardClient implements Shards {
  private readonly ports: Array<{ raw: MessagePort; out: BatchedPort } | null>
  private readonly pending = new PendingAsks()
  private closing = false
  private readonly sweep: NodeJS.Timeout
  restarts = 0

  constructor (readonly size: number, private readonly timeoutMs = 10000) {
    this.ports = Array.from({ length: size }, () => null)
    this.sweep = setInterval(() => this.pending.expire(), 200)
    this.sweep.unref()
  }

  /** Uses `raw` for `shard` from now on (first port, or a restarted shard's). */
  attach (shard: number, raw: MessagePort): void {
    const old = this.ports[shard]
    if (old) {
      old.raw.removeAllListeners()
      old.raw.close()
      this.restarts++
      this.pending.failShard(shard, `shard ${shard} restarted`)
    }
    raw.on('message', (b: Batch) => {
      if (b.rep) this.pending.settle(b.rep)
    })
    this.ports[shard] = { raw, out: new BatchedPort(raw) }
  }

  async ready (): Promise<void> {}

  shardOf (accountId: number): number { return accountId % this.size }

  ask<K extends ShardTag> (accountId: number, msg: { type: K } & ShardRequests[K]['req'], timeoutMs?: number): Promise<ShardRequests[K]['res']> {
    return this.askShard(this.shardOf(accountId), msg, timeoutMs)
  }

  askShard<K extends ShardTag> (shard: number, msg: { type: K } & ShardRequests[K]['req'], timeoutMs = this.timeoutMs): Promise<ShardRequests[K]['res']> {
    if (this.closing) return Promise.reject(new ApiError('SERVICE_UNAVAILABLE', 'Service is shutting down'))
    const port = this.ports[shard]
    if (!port) return Promise.reject(new ApiError('SERVICE_UNAVAILABLE', `Shard ${shard} is not reachable yet`))
    return new Promise((resolve, reject) => {
      const id = this.pending.add(shard, timeoutMs, resolve, reject)
      port.out.request({ id, msg: msg as ShardMsg })
    })
  }

  /** Worker measurements are gathered by the main thread (its /metrics sums every thread). */
  async stats (): Promise<Array<ShardRequests['shard.stats']['res']>> { return [] }

  async crash (): Promise<void> { throw new Error('shard crashes are simulated from the main thread') }

  async close (): Promise<void> {
    for (const p of this.ports) p?.out.flush()
    this.closing = true
    clearInterval(this.sweep)
    for (let i = 0; i < this.size; i++) this.pending.failShard(i, 'shutting down')
    for (const p of this.ports) { p?.raw.removeAllListeners(); p?.raw.close() }
  }
}
