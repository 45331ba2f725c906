import { BroadcastChannel } from 'node:worker_threads'
import type { ThreadMessage } from '../http/front-ends/protocol.js'

/**
 * The in-process bus between front-end threads (docs/decisions.md "Front-end threads"): job
 * events, credential/account invalidations and shard restarts, posted once and delivered to
 * every other thread of the process on the same channel name (never back to the sender).
 */
export class ThreadBus {
  private readonly ch: BroadcastChannel

  constructor (name: string, onMessage: (m: ThreadMessage) => void) {
    this.ch = new BroadcastChannel(name)
    this.ch.onmessage = (e) => onMessage((e as { data: ThreadMessage }).data)
    // The channel must not keep a thread alive on its own.
    ;(this.ch as unknown as { unref?: () => void }).unref?.()
  }

  post (m: ThreadMessage): void { this.ch.postMessage(m) }

  close (): void { this.ch.close() }
}
