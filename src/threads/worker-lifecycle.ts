import { Worker } from 'node:worker_threads'

export interface ManagedWorkerOptions<In> {
  /** Module URL of the worker script. */
  url: URL
  /** workerData of each (re)start. */
  data: () => unknown
  /** Used in log lines ("shard 2", "webhook delivery worker"). */
  name: string
  /** Every message of the current worker; `ready()` marks it started. */
  onMessage: (m: In, ready: () => void) => void
  /** The current worker ended (crash, exit, terminate): fail what waits on it. */
  onExit?: (code: number) => void
  /** It was restarted after an unexpected exit. */
  onRestart?: () => void
  /** Restart after an unexpected exit (default true; a delivery pool's extra worker is not). */
  restart?: boolean
  onLog?: (level: 'warn' | 'error', msg: string) => void
}

/**
 * One worker thread's life, shared by the shard and delivery pools: start,
 * restart after a crash (state lives in PostgreSQL, the new worker recovers it), and drain
 * (a last message, then terminate after a grace period). `ready` follows the current worker.
 */
export class ManagedWorker<In = unknown> {
  worker!: Worker
  ready!: Promise<void>
  private closing = false
  restarts = 0

  constructor (private readonly o: ManagedWorkerOptions<In>) { this.start() }

  private start (): void {
    const worker = new Worker(this.o.url, { workerData: this.o.data() })
    let markReady: () => void = () => {}
    let failReady: (e: Error) => void = () => {}
    this.ready = new Promise<void>((resolve, reject) => { markReady = resolve; failReady = reject })
    this.ready.catch(() => {})
    this.worker = worker
    worker.on('message', (m: In) => this.o.onMessage(m, markReady))
    worker.on('error', (err) => {
      this.o.onLog?.('error', `${this.o.name} crashed: ${err?.stack ?? err}`)
      failReady(err)
    })
    worker.on('exit', (code) => {
      failReady(new Error(`${this.o.name} exited with code ${code}`))
      if (worker !== this.worker) return
      this.o.onExit?.(code)
      if (this.closing) return
      if (this.o.restart === false) { this.o.onLog?.('warn', `${this.o.name} exited with code ${code}`); return }
      this.o.onLog?.('warn', `${this.o.name} exited with code ${code}; restarting`)
      this.restarts++
      this.start()
      this.o.onRestart?.()
    })
  }

  post (m: unknown): void { this.worker.postMessage(m) }

  /**
   * Stops restarting, runs `drain` (a last request the worker answers when done; bounded by
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
    await this.worker.terminate()
  }

  /** Test hook: ends the worker as a crash would (it is restarted). */
  async crash (): Promise<void> { await this.worker.terminate() }
}
