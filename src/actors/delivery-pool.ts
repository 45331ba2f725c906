import { Worker } from 'node:worker_threads'
import type { Config } from '../config.js'
import type { DeliveryCommand, DeliveryInit, DeliveryReport } from './delivery-worker.js'
import type { StatsSnapshot } from '../worker-stats.js'

export interface DeliveryPoolOptions {
  databaseUrl: string
  config: Config
  version: string
  onLog?: (level: 'warn' | 'error', msg: string) => void
}

/**
 * The main thread's handle on the webhook delivery worker (DESIGN.md 2 "delivery pool").
 * The worker holds no state that is not in PostgreSQL, so a crashed one is simply restarted;
 * the rows it had claimed come back when their lease expires.
 */
export class DeliveryPool {
  private worker: Worker
  private readyPromise: Promise<void>
  private closing = false
  /** Restarts so far (observability and tests). */
  restarts = 0
  private statsSeq = 0
  private readonly statsWaiters = new Map<number, (s: StatsSnapshot | null) => void>()

  constructor (private readonly opts: DeliveryPoolOptions) {
    const s = this.spawn()
    this.worker = s.worker
    this.readyPromise = s.ready
  }

  /** Resolves once the worker is connected and its first claim is under way. */
  ready (): Promise<void> { return this.readyPromise }

  /** Claim now instead of at the next poll (the worker also LISTENs for new outbox rows). */
  wake (): void { this.send({ type: 'wake' }) }

  /** The worker's measurements for /metrics (src/metrics.ts); null if it does not answer within `timeoutMs`. */
  stats (timeoutMs = 1000): Promise<StatsSnapshot | null> {
    if (this.closing) return Promise.resolve(null)
    const id = ++this.statsSeq
    return new Promise(resolve => {
      const timer = setTimeout(() => { this.statsWaiters.delete(id); resolve(null) }, timeoutMs)
      this.statsWaiters.set(id, (s) => { clearTimeout(timer); this.statsWaiters.delete(id); resolve(s) })
      this.worker.postMessage({ type: 'stats', id } satisfies DeliveryCommand)
    })
  }

  private send (m: DeliveryCommand): void {
    if (!this.closing) this.worker.postMessage(m)
  }

  private spawn (): { worker: Worker; ready: Promise<void> } {
    const init: DeliveryInit = { databaseUrl: this.opts.databaseUrl, config: this.opts.config, version: this.opts.version }
    const worker = new Worker(new URL('./delivery-worker.js', import.meta.url), { workerData: init })
    let markReady: () => void = () => {}
    let failReady: (e: Error) => void = () => {}
    const ready = new Promise<void>((resolve, reject) => { markReady = resolve; failReady = reject })
    ready.catch(() => {})
    worker.on('message', (m: DeliveryReport) => {
      if (m.type === 'ready') markReady()
      else if (m.type === 'stats') this.statsWaiters.get(m.id)?.(m.stats)
    })
    worker.on('error', (err) => {
      this.opts.onLog?.('error', `webhook delivery worker crashed: ${err?.stack ?? err}`)
      failReady(err)
    })
    worker.on('exit', (code) => {
      failReady(new Error(`webhook delivery worker exited with code ${code}`))
      if (this.closing || worker !== this.worker) return
      this.opts.onLog?.('warn', `webhook delivery worker exited with code ${code}; restarting`)
      this.restarts++
      const s = this.spawn()
      this.worker = s.worker
      this.readyPromise = s.ready
    })
    return { worker, ready }
  }

  /**
   * Stops claiming, lets requests in flight finish for up to `graceMs` (then abandons them and
   * releases their claims for the next pool), and ends the worker.
   */
  async close (graceMs = 3000): Promise<void> {
    if (this.closing) return
    this.closing = true
    const w = this.worker
    const stopped = new Promise<void>(resolve => {
      w.on('message', (m: DeliveryReport) => { if (m.type === 'stopped') resolve() })
      w.once('exit', () => resolve())
    })
    w.postMessage({ type: 'stop', graceMs } satisfies DeliveryCommand)
    let timer: NodeJS.Timeout | undefined
    await Promise.race([stopped, new Promise<void>(resolve => { timer = setTimeout(resolve, graceMs + 5000) })])
    clearTimeout(timer)
    await w.terminate()
  }
}
