import { BroadcastChannel } from 'node:worker_threads'

/**
 * The in-process bus between front-end threads (docs/decisions.md "Front-end threads"): a
 * message posted once is delivered to every other thread of the process on the same channel
 * name (never back to the sender). What crosses on it (job events, invalidations, shard
 * restarts) is `ThreadMessage` of src/http/front-ends/protocol.ts.
 */
export class ThreadBus<M> {
  private readonly ch: BroadcastChannel

  constructor (name: string, onMessage: (m: M) => void) {
    this.ch = new BroadcastChannel(name)
    this.ch.onmessage = (e) => onMessage((e as { data: M }).data)
    // The channel must not keep a thread alive on its own.
    ;(this.ch as unknown as { unref?: () => void }).unref?.()
  }

  post (m: M): void { this.ch.postMessage(m) }

  close (): void { this.ch.close() }
}
