import { Worker } from 'node:worker_threads'
import { Channel, type Handlers, type Side, type Tell } from './channel.js'

/** What every worker thread sends: `ready` once it has started (then whatever its protocol adds). */
export interface WorkerSide extends Side { tells: { ready: Record<never, never> } }

export interface ManagedWorkerOptions<In extends WorkerSide> {
  /** Module URL of the worker script. */
  url: URL
  /** workerData of each (re)start. */
  data: () => unknown
  /** Used in log lines and errors ("shard 2", "webhook delivery worker"). */
  name: string
  /** Answers the worker's asks. */
  handlers: Handlers<In>
  /** The worker's tells other than `ready`. */
  onTell?: (m: Exclude<Tell<In>, { tag: 'ready' }>) => void
  /** Default timeout of an ask to the worker. */
  timeoutMs?: number
  /** The current worker ended (crash, exit, terminate); what was pending on it has failed. */
  onExit?: (code: number) => void
  /** It was restarted after an unexpected exit. */
  onRestart?: () => void
  /** Restart after an unexpected exit (default true; a delivery pool's extra worker is not). */
  restart?: boolean
  onLog?: (level: 'warn' | 'error', msg: string) => void
  /**
   * The most the thread's young generation may grow to, in MB (Worker `resourceLimits`);
   * unset: V8's default.
   */
  youngGenerationMb?: number
}

/**
 * One worker thread's life, shared by the shard, delivery and front-end pools
 * (docs/architecture.md "Threads"): start, restart after a crash (state lives in PostgreSQL,
 * the new worker recovers it), and drain (a last ask, then terminate after a grace period).
 * `channel` talks to the current worker; when it ends, what was pending on it fails with
 * INTERNAL_ERROR. `ready` follows the current worker (its `ready` tell).
 */
export class ManagedWorker<Out extends Side, In extends WorkerSide> {
  worker!: Worker
  ready!: Promise<void>
  readonly channel: Channel<Out, In>
  private markReady: () => void = () => {}
  private closing = false
  restarts = 0

  constructor (private readonly o: ManagedWorkerOptions<In>) {
    this.channel = new Channel<Out, In>({ postMessage: (v, t) => this.worker.postMessage(v, t) }, {
      peer: o.name,
      handlers: o.handlers,
      timeoutMs: o.timeoutMs,
      onTell: (m) => {
        if (m.tag === 'ready') this.markReady()
        else o.onTell?.(m as Exclude<Tell<In>, { tag: 'ready' }>)
      },
    })
    this.start()
  }

  private start (): void {
    const young = this.o.youngGenerationMb
    const worker = new Worker(this.o.url, { workerData: this.o.data(), ...(young ? { resourceLimits: { maxYoungGenerationSizeMb: young } } : {}) })
    let failReady: (e: Error) => void = () => {}
    this.ready = new Promise<void>((resolve, reject) => { this.markReady = resolve; failReady = reject })
    this.ready.catch(() => {})
    this.worker = worker
    worker.on('message', this.channel.receive.bind(this.channel))
    worker.on('error', (err) => {
      this.o.onLog?.('error', `${this.o.name} crashed: ${err?.stack ?? err}`)
      failReady(err)
    })
    worker.on('exit', (code) => {
      failReady(new Error(`${this.o.name} exited with code ${code}`))
      if (worker !== this.worker) return
      this.channel.failAll(this.closing ? 'shutting down' : `${this.o.name} exited`)
      this.o.onExit?.(code)
      if (this.closing) { this.channel.close(); return }
      if (this.o.restart === false) { this.o.onLog?.('warn', `${this.o.name} exited with code ${code}`); this.channel.close(); return }
      this.o.onLog?.('warn', `${this.o.name} exited with code ${code}; restarting`)
      this.restarts++
      this.start()
      this.o.onRestart?.()
    })
  }

  /**
   * Stops restarting, runs `drain` (a last ask the worker answers when done; bounded by
   * `graceMs`), then terminates the worker.
   */
  async close (drain?: () => Promise<unknown>, graceMs = 5000): Promise<void> {
    if (this.closing) return
    this.closing = true
    if (drain) {
      let timer: NodeJS.Timeout | undefined
      await Promise.race([drain().catch(() => {}), new Promise<void>(resolve => { timer = setTimeout(resolve, graceMs) })])
      clearTimeout(timer)
    }
    this.channel.flush()
    await this.worker.terminate()
    this.channel.close()
  }

  /** Test hook: ends the worker as a crash would (it is restarted). */
  async crash (): Promise<void> { await this.worker.terminate() }
}
