import type { MessagePort } from 'node:worker_threads'
import { ApiError } from '../errors.js'
import { Channel, type ReqOf } from '../threads/channel.js'
import type { Shards } from './shard-pool.js'
import type { FromShard, ShardRequests, ShardTag, ToShard } from './protocol.js'

/**
 * A front-end thread's handle on the shards (docs/decisions.md "Front-end threads"): one
 * channel per shard over a MessagePort handed over by the main thread, so asks go straight to
 * the shard and replies come straight back. When a shard ends its port closes and what was
 * pending on it fails with INTERNAL_ERROR, as in ShardPool; the main thread then sends the
 * restarted shard's port.
 */
export class ShardClient implements Shards {
  private readonly channels: Array<{ port: MessagePort; ch: Channel<ToShard, FromShard> } | null>
  private closing = false
  restarts = 0

  constructor (readonly size: number, private readonly timeoutMs = 10000) {
    this.channels = Array.from({ length: size }, () => null)
  }

  /** Uses `port` for `shard` from now on (first port, or a restarted shard's). */
  attach (shard: number, port: MessagePort): void {
    const old = this.channels[shard]
    if (old) {
      this.restarts++
      old.ch.close(`shard ${shard} restarted`)
      old.port.close()
    }
    this.channels[shard] = { port, ch: Channel.over(port, { peer: `shard ${shard}`, handlers: {}, timeoutMs: this.timeoutMs }) }
  }

  async ready (): Promise<void> {}

  shardOf (accountId: number): number { return accountId % this.size }

  ask<K extends ShardTag> (accountId: number, msg: { type: K } & ShardRequests[K]['req'], timeoutMs?: number): Promise<ShardRequests[K]['res']> {
    return this.askShard(this.shardOf(accountId), msg, timeoutMs)
  }

  askShard<K extends ShardTag> (shard: number, msg: { type: K } & ShardRequests[K]['req'], timeoutMs?: number): Promise<ShardRequests[K]['res']> {
    if (this.closing) return Promise.reject(new ApiError('SERVICE_UNAVAILABLE', 'Service is shutting down'))
    const c = this.channels[shard]
    if (!c) return Promise.reject(new ApiError('SERVICE_UNAVAILABLE', `Shard ${shard} is not reachable yet`))
    return c.ch.ask(msg.type, msg as ReqOf<ToShard, K>, timeoutMs) as Promise<ShardRequests[K]['res']>
  }

  /** Worker measurements are gathered by the main thread (its /metrics sums every thread). */
  async stats (): Promise<Array<ShardRequests['shard.stats']['res']>> { return [] }

  async crash (): Promise<void> { throw new Error('shard crashes are simulated from the main thread') }

  async close (): Promise<void> {
    this.closing = true
    for (const c of this.channels) {
      if (!c) continue
      c.ch.flush()
      c.ch.close()
      c.port.close()
    }
  }
}
