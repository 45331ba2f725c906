import type { Batch, Envelope, ReplyEnvelope, ShardEvent } from '../shard/protocol.js'

export interface PortLike {
  postMessage (value: unknown): void
}

/**
 * Batches everything sent to one port during an event-loop turn into a single postMessage
 * (docs/architecture.md "Messages between threads"): one structured-clone hop per turn, however many requests, replies
 * and events were produced. The batch crosses as the plain object: measured by
 * bench/crossing.ts against msgpackr (a view into its shared buffer, as before, copied the
 * whole buffer on every post; packed bytes copied into their own transferred buffer), plain
 * structured clone was the cheapest in every case and copies nothing but the message itself
 * (docs/decisions.md "Thread crossing").
 */
export class BatchedPort {
  private batch: Batch | null = null
  constructor (private readonly port: PortLike) {}

  request (env: Envelope): void { (this.open().req ??= []).push(env) }
  reply (rep: ReplyEnvelope): void { (this.open().rep ??= []).push(rep) }
  event (ev: ShardEvent): void { (this.open().ev ??= []).push(ev) }

  private open (): Batch {
    if (this.batch === null) {
      this.batch = {}
      setImmediate(this.flush)
    }
    return this.batch
  }

  flush = (): void => {
    const b = this.batch
    if (b === null) return
    this.batch = null
    this.port.postMessage(b)
  }
}
