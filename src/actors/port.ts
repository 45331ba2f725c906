import { Packr } from 'msgpackr'
import type { Batch, Envelope, ReplyEnvelope, ShardEvent } from './protocol.js'

const packr = new Packr({ useRecords: false, moreTypes: false })

export interface PortLike {
  postMessage (value: unknown): void
}

/**
 * Batches everything sent to one port during an event-loop turn into a single postMessage
 * (DESIGN.md section 2): one msgpackr encode and one structured-clone hop per turn, however
 * many requests, replies and events were produced.
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
    this.port.postMessage(packr.pack(b))
  }
}

export function decodeBatch (data: Uint8Array): Batch {
  return packr.unpack(data) as Batch
}
