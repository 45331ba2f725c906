import { MessageChannel } from 'node:worker_threads'
import { ManagedWorker } from '../../threads/worker-lifecycle.js'
import type { Handlers } from '../../threads/channel.js'
import type { ShardPool } from '../../shard/shard-pool.js'
import type { FrontendInit, FrontendStats, ToFrontend, ToMain } from './protocol.js'

type Front = ManagedWorker<ToFrontend, ToMain>

export interface FrontendPoolOptions {
  /** Threads besides the main one. */
  extra: number
  init: Omit<FrontendInit, 'index'>
  shards: ShardPool
  /** What the front-end threads ask of the main thread. */
  handlers: Handlers<ToMain>
  onLog?: (level: 'warn' | 'error', msg: string) => void
}

/**
 * The main thread's handle on the other front-end threads (docs/decisions.md "Front-end
 * threads"). Each gets a MessagePort per shard at start (and again when it or a shard
 * restarts); a crashed front-end thread is restarted (its sockets are lost, the port keeps
 * being served by the others).
 */
export class FrontendPool {
  private readonly fronts: Front[] = []
  private closed = false

  constructor (private readonly o: FrontendPoolOptions) {
    for (let i = 1; i <= o.extra; i++) this.fronts.push(this.spawn(i))
  }

  async ready (): Promise<void> { await Promise.all(this.fronts.map(f => f.ready)) }

  get size (): number { return this.fronts.length }
  get restarts (): number { return this.fronts.reduce((n, f) => n + f.restarts, 0) }

  private spawn (index: number): Front {
    const front: Front = new ManagedWorker<ToFrontend, ToMain>({
      url: new URL('./worker.js', import.meta.url),
      data: () => ({ ...this.o.init, index } satisfies FrontendInit),
      name: `front-end ${index}`,
      handlers: this.o.handlers,
      // A password hash waits its turn in the scrypt pool: longer than a shard's answer.
      timeoutMs: 30_000,
      onRestart: () => { for (let s = 0; s < this.o.shards.size; s++) this.connect(front, s) },
      onLog: this.o.onLog,
    })
    for (let s = 0; s < this.o.shards.size; s++) this.connect(front, s)
    return front
  }

  /** A fresh channel between front end `f` and shard `shard`. */
  private connect (f: Front, shard: number): void {
    const { port1, port2 } = new MessageChannel()
    this.o.shards.attach(shard, port2)
    f.channel.tell('shard', { shard, port: port1 }, [port1])
  }

  /** Shard `shard` restarted: every front end gets a channel to the new worker. */
  shardRestarted (shard: number): void { for (const f of this.fronts) this.connect(f, shard) }

  /** Every front end's request metrics; one that does not answer in 1 s is left out. */
  async stats (): Promise<FrontendStats[]> {
    const all = await Promise.all(this.fronts.map(f => f.channel.ask('stats', {}, 1000).catch(() => null)))
    return all.filter((s): s is FrontendStats => s !== null)
  }

  /** Every front end's metering rows (all, or one account's) written; one that does not answer in 2 s is not waited for. */
  async flushMetering (accountId: number | null): Promise<void> {
    if (this.closed) return
    await Promise.all(this.fronts.map(f => f.channel.ask('metering.flush', { accountId }, 2000).catch(() => null)))
  }

  /**
   * Test hook: front end `i` (1-based) fails with an uncaught exception. (A thread ended from
   * outside with its uWS sockets open would abort the process: Node refuses to close a loop
   * with open handles.)
   */
  async crash (i: number): Promise<void> {
    const f = this.fronts[i - 1]
    // Resolves once the thread is gone (before its restart), so what follows sees the port
    // served by the others only.
    const gone = new Promise<void>(resolve => f.worker.once('exit', () => resolve()))
    f.channel.tell('crash', {})
    f.channel.flush()
    await gone
  }

  /** Drains every front end (stop accepting, finish requests, end streams, flush metering), then ends it. */
  async close (): Promise<void> {
    if (this.closed) return
    this.closed = true
    await Promise.all(this.fronts.map(f => f.close(() => f.channel.ask('close', {}, 15_000), 15_000)))
  }
}
