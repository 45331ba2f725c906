import { Worker } from 'node:worker_threads'
import { availableParallelism } from 'node:os'
import type { Config } from '../config.js'
import type { DeliveryCommand, DeliveryInit, DeliveryReport } from './delivery-worker.js'
import { DELIVERY_TIMEOUT_MS } from './delivery.js'
import type { StatsSnapshot } from '../worker-stats.js'

export interface DeliveryPoolOptions {
  databaseUrl: string
  config: Config
  version: string
  onLog?: (level: 'warn' | 'error', msg: string) => void
  /** Most delivery workers at once (default: the number of cores, at least 2). */
  maxWorkers?: number
  /** An extra worker is stopped after the backlog has been shallow this long (ms). */
  idleRetireMs?: number
}

interface Slot {
  worker: Worker
  ready: Promise<void>
  /** Its last claim filled the limit: more rows are due than it can hold. */
  deep: boolean
  /** The first worker: always running, restarted if it dies. Extra workers are not. */
  primary: boolean
  stopping: boolean
  /** Set once it is being stopped: settles when it has ended. */
  stopped?: Promise<void>
}

/**
 * The main thread's handle on the webhook delivery workers (DESIGN.md 2 "delivery pool").
 * One worker always runs; while a worker reports a deep backlog (its claims fill their limit)
 * another is started, up to `maxWorkers`, and extra workers are stopped once no worker has
 * reported a deep backlog for `idleRetireMs` (issue 13). Workers claim with a lease and SKIP
 * LOCKED, exactly as pools of different nodes do, so no delivery is held by two of them at
 * once. A worker holds no state that is not in PostgreSQL: a crashed primary is restarted, and
 * the rows any worker had claimed come back when their lease expires.
 */
export class DeliveryPool {
  private readonly slots: Slot[] = []
  private closing = false
  private readonly maxWorkers: number
  private readonly idleRetireMs: number
  private lastDeepAt = 0
  private readonly retireTimer: NodeJS.Timeout
  /** Restarts so far (observability and tests). */
  restarts = 0
  /** Extra workers started so far (observability and tests). */
  scaleUps = 0
  private statsSeq = 0
  private readonly statsWaiters = new Map<number, (s: StatsSnapshot | null) => void>()

  constructor (private readonly opts: DeliveryPoolOptions) {
    this.maxWorkers = Math.max(1, opts.maxWorkers ?? Math.max(2, availableParallelism()))
    this.idleRetireMs = opts.idleRetireMs ?? 10_000
    this.slots.push(this.spawn(true))
    this.retireTimer = setInterval(() => this.retire(), Math.max(100, Math.min(5000, this.idleRetireMs / 2)))
    this.retireTimer.unref()
  }

  /** Workers running now. */
  get workers (): number { return this.slots.filter(s => !s.stopping).length }

  /** Resolves once the primary worker is connected and its first claim is under way. */
  ready (): Promise<void> { return this.slots[0].ready }

  /**
   * Each running worker's measurements for /metrics (src/metrics.ts); a worker that does not
   * answer within `timeoutMs` is left out. An extra worker's counts leave with it when it is
   * retired (a counter reset for Prometheus).
   */
  async stats (timeoutMs = 1000): Promise<StatsSnapshot[]> {
    if (this.closing) return []
    const all = await Promise.all(this.slots.filter(s => !s.stopping).map(s => new Promise<StatsSnapshot | null>(resolve => {
      const id = ++this.statsSeq
      const timer = setTimeout(() => { this.statsWaiters.delete(id); resolve(null) }, timeoutMs)
      this.statsWaiters.set(id, (snap) => { clearTimeout(timer); this.statsWaiters.delete(id); resolve(snap) })
      s.worker.postMessage({ type: 'stats', id } satisfies DeliveryCommand)
    })))
    return all.filter((x): x is StatsSnapshot => x !== null)
  }

  /** Claim now instead of at the next poll (the workers also LISTEN for new outbox rows). */
  wake (): void { for (const s of this.slots) this.send(s, { type: 'wake' }) }

  private send (s: Slot, m: DeliveryCommand): void {
    if (!this.closing && !s.stopping) s.worker.postMessage(m)
  }

  private spawn (primary: boolean): Slot {
    const init: DeliveryInit = { databaseUrl: this.opts.databaseUrl, config: this.opts.config, version: this.opts.version }
    const worker = new Worker(new URL('./delivery-worker.js', import.meta.url), { workerData: init })
    let markReady: () => void = () => {}
    let failReady: (e: Error) => void = () => {}
    const ready = new Promise<void>((resolve, reject) => { markReady = resolve; failReady = reject })
    ready.catch(() => {})
    const slot: Slot = { worker, ready, deep: false, primary, stopping: false }
    worker.on('message', (m: DeliveryReport) => {
      if (m.type === 'ready') markReady()
      else if (m.type === 'stats') this.statsWaiters.get(m.id)?.(m.stats)
      else if (m.type === 'backlog') {
        slot.deep = m.deep
        if (m.deep) { this.lastDeepAt = Date.now(); this.scaleUp() }
      }
    })
    worker.on('error', (err) => {
      this.opts.onLog?.('error', `webhook delivery worker crashed: ${err?.stack ?? err}`)
      failReady(err)
    })
    worker.on('exit', (code) => {
      failReady(new Error(`webhook delivery worker exited with code ${code}`))
      const i = this.slots.indexOf(slot)
      if (i >= 0) this.slots.splice(i, 1)
      if (this.closing || slot.stopping) return
      if (!primary) { this.opts.onLog?.('warn', `extra webhook delivery worker exited with code ${code}`); return }
      this.opts.onLog?.('warn', `webhook delivery worker exited with code ${code}; restarting`)
      this.restarts++
      this.slots.unshift(this.spawn(true))
    })
    return slot
  }

  /** A worker reports more due rows than it can hold: start one more, up to maxWorkers. */
  private scaleUp (): void {
    if (this.closing || this.workers >= this.maxWorkers) return
    this.scaleUps++
    this.slots.push(this.spawn(false))
  }

  /** Stops one extra worker once no worker has seen a deep backlog for idleRetireMs. */
  private retire (): void {
    if (this.closing || Date.now() - this.lastDeepAt < this.idleRetireMs) return
    if (this.slots.some(s => s.deep && !s.stopping)) return
    const extra = this.slots.find(s => !s.primary && !s.stopping)
    // Every request in flight is let finish (a 2xx or its timeout is recorded): abandoning one
    // would release its claim while the receiver may already have it, and another worker would
    // send it again (a duplicate). Only claimed rows not yet sent are handed back.
    if (extra) extra.stopped = this.stopSlot(extra, DELIVERY_TIMEOUT_MS + 2000)
  }

  /**
   * Stops claiming, lets requests in flight finish for up to `graceMs` (then abandons them and
   * releases their claims for another worker or node), and ends the worker.
   */
  private async stopSlot (s: Slot, graceMs: number): Promise<void> {
    s.stopping = true
    s.deep = false
    const w = s.worker
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

  /** Graceful stop of every worker (see stopSlot). */
  async close (graceMs = 3000): Promise<void> {
    if (this.closing) return
    this.closing = true
    clearInterval(this.retireTimer)
    await Promise.all([...this.slots].map(s => s.stopped ?? (s.stopped = this.stopSlot(s, graceMs))))
  }
}
