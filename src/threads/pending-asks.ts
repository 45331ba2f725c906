import { ApiError, errorFromWire } from '../errors.js'
import type { Batch, ShardReply } from '../shard/protocol.js'

interface Pending { resolve: (v: ShardReply) => void; reject: (e: Error) => void; deadline: number; shard: number }

/**
 * Asks to the shards awaiting their replies, shared by ShardPool (main thread) and ShardClient
 * (front-end threads): pairs each reply with its ask, fails a dead shard's asks, expires late ones.
 */
export class PendingAsks {
  private readonly pending = new Map<number, Pending>()
  private nextId = 1

  /** Registers an ask and returns its id (the caller posts the request with it). */
  add (shard: number, timeoutMs: number, resolve: Pending['resolve'], reject: Pending['reject']): number {
    const id = this.nextId++
    this.pending.set(id, { resolve, reject, deadline: Date.now() + timeoutMs, shard })
    return id
  }

  /** Settles the asks a batch of replies answers. */
  settle (rep: NonNullable<Batch['rep']>): void {
    for (const r of rep) {
      const p = this.pending.get(r.id)
      if (!p) continue
      this.pending.delete(r.id)
      if (r.ok) p.resolve(r.value)
      else p.reject(errorFromWire(r.code, r.message, r.extra))
    }
  }

  failShard (shard: number, why: string): void {
    for (const [id, p] of this.pending) {
      if (p.shard !== shard) continue
      this.pending.delete(id)
      p.reject(new ApiError('INTERNAL_ERROR', `Internal error (${why}); safe to retry with the same Idempotency-Key`))
    }
  }

  expire (): void {
    const now = Date.now()
    for (const [id, p] of this.pending) {
      if (p.deadline > now) continue
      this.pending.delete(id)
      p.reject(new ApiError('INTERNAL_ERROR', 'Internal error (shard did not answer in time); safe to retry'))
    }
  }
}
