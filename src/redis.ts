import { Redis } from 'ioredis'
import type { Logger } from 'pino'
import type { JobView } from './jobs/view.js'

/** Messages nodes exchange over Redis pub/sub (docs/architecture.md "Several nodes"). */
export type BusMessage =
  /** A job changed on the node that runs it: other nodes update their read cache and SSE streams. */
  | { t: 'job'; n: string; a: number; j: JobView }
  /** A credential or account changed: other nodes drop their cached copy at once. */
  | { t: 'inv'; n: string; k: 'key' | 'account'; id: string }


/**
 * The cross-node bus (only with REDIS_URL): one publishing and one subscribed connection.
 * A node ignores its own messages (`n` is the node id).
 */
export class RedisBus {
  readonly pub: Redis
  private readonly sub: Redis
  private handler: ((m: BusMessage) => void) | null = null

  private readonly channel: string

  constructor (url: string, readonly prefix: string, readonly nodeId: string, private readonly log: Logger) {
    this.channel = `${prefix}:bus`
    this.pub = new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 2, enableOfflineQueue: true })
    this.sub = new Redis(url, { lazyConnect: false, maxRetriesPerRequest: null })
    for (const c of [this.pub, this.sub]) c.on('error', (err) => this.log.warn({ err: String(err) }, 'redis error'))
    this.sub.on('message', (_ch, raw) => {
      let m: BusMessage
      try { m = JSON.parse(raw) } catch { return }
      if (m.n === this.nodeId) return
      this.handler?.(m)
    })
  }

  async start (onMessage: (m: BusMessage) => void): Promise<void> {
    this.handler = onMessage
    await this.sub.subscribe(this.channel)
  }

  publish (m: { t: 'job'; a: number; j: JobView } | { t: 'inv'; k: 'key' | 'account'; id: string }): void {
    this.pub.publish(this.channel, JSON.stringify({ ...m, n: this.nodeId })).catch((err) => this.log.warn({ err: String(err) }, 'redis publish failed'))
  }

  async close (): Promise<void> {
    this.handler = null
    await Promise.allSettled([this.sub.quit(), this.pub.quit()])
  }
}
