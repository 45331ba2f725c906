import { availableParallelism } from 'node:os'
import type { Config } from '../config.js'
import type { DeliveryInit, FromDelivery, ToDelivery } from './protocol.js'
import { DELIVERY_TIMEOUT_MS } from './delivery.js'
import { CLAIM_LEASE_S } from '../domain.js'
import { ManagedWorker } from '../threads/worker-lifecycle.js'
import type { StatsSnapshot } from '../worker-stats.js'
import type { ClaimedDelivery } from '../db/webhooks.js'

export interface DeliveryPoolOptions {
  databaseUrl: string
  config: Config
  version: string
  onLog?: (level: 'warn' | 'error', msg: string) => void
  /** Most delivery workers at once (default: half the cores, at least 1; config WEBHOOK_WORKERS). */
  maxWorkers?: number
  /** An extra worker is stopped after the backlog has been shallow this long (ms). */
  idleRetireMs?: number
  /** Claim lease in seconds (default CLAIM_LEASE_S; tests shorten it to see a crashed worker's rows come back). */
  leaseSeconds?: number
}

interface Slot {
  worker: ManagedWorker<ToDelivery, FromDelivery>
  /** Its last claim filled the limit: more rows are due than it can hold. */
  deep: boolean
  /** The first worker: always running, restarted if it dies. Extra workers are not. */
  primary: boolean
  stopping: boolean
  /** Set once it is being stopped: settles when it has ended. */
  stopped?: Promise<void>
}

/**
 * The main thread's handle on the webhook delivery workers (docs/architecture.md "Threads").
 * One worker always runs; while a worker reports a deep backlog (its claims fill their limit)
 * another is started, up to `maxWorkers`, and extra workers are stopped once no worker has
 * reported a deep backlog for `idleRetireMs`. Workers claim with a lease and SKIP
 * LOCKED, exactly as pools of different nodes do, so no delivery is held by two of them at
 * once. Each worker's start, restart and drain is the shared ManagedWorker lifecycle, its
 * messages the channel of src/webhooks/protocol.ts: it holds no state that is not in
 * PostgreSQL, so a crashed primary is restarted, and the rows any worker had claimed come back
 * when their lease expires.
 */
export class DeliveryPool {
  private readonly slots: Slot[] = []
  private closing = false
  private readonly maxWorkers: number
  private readonly idleRetireMs: number
  private lastDeepAt = 0
  private readonly retireTimer: NodeJS.Timeout
  private readonly primary: Slot
  /** Extra workers started so far (observability and tests). */
  scaleUps = 0
  /** Rows handed to the primary worker so far (observability and tests). */
  handed = 0

  constructor (private readonly opts: DeliveryPoolOptions) {
    this.maxWorkers = Math.max(1, opts.maxWorkers ?? Math.max(1, Math.floor(availableParallelism() / 2)))
    this.idleRetireMs = opts.idleRetireMs ?? 10_000
    this.primary = this.spawn(true)
    this.retireTimer = setInterval(() => this.retire(), Math.max(100, Math.min(5000, this.idleRetireMs / 2)))
    this.retireTimer.unref()
  }

  /** Workers running now. */
  get workers (): number { return this.slots.filter(s => !s.stopping).length }

  /** Restarts of the primary worker so far (observability and tests). */
  get restarts (): number { return this.primary.worker.restarts }

  /** Resolves once the primary worker is connected and its first claim is under way. */
  ready (): Promise<void> { return this.primary.worker.ready }

  /**
   * Each running worker's measurements for /metrics (src/metrics.ts); a worker that does not
   * answer within `timeoutMs` is left out. An extra worker's counts leave with it when it is
   * retired (a counter reset for Prometheus).
   */
  async stats (timeoutMs = 1000): Promise<StatsSnapshot[]> {
    if (this.closing) return []
    const all = await Promise.all(this.slots.filter(s => !s.stopping).map(s => s.worker.channel.ask('stats', {}, timeoutMs).catch(() => null)))
    return all.filter((x): x is StatsSnapshot => x !== null)
  }

  private spawn (primary: boolean): Slot {
    const init: DeliveryInit = {
      databaseUrl: this.opts.databaseUrl, config: this.opts.config, version: this.opts.version,
      leaseSeconds: this.opts.leaseSeconds ?? CLAIM_LEASE_S,
    }
    const slot = { deep: false, primary, stopping: false } as Slot
    slot.worker = new ManagedWorker<ToDelivery, FromDelivery>({
      url: new URL('./delivery-worker.js', import.meta.url),
      data: () => init,
      name: primary ? 'webhook delivery worker' : 'extra webhook delivery worker',
      restart: primary,
      handlers: {},
      onTell: (m) => {
        if (m.tag !== 'backlog') return
        slot.deep = m.body.deep
        if (m.body.deep) { this.lastDeepAt = Date.now(); this.scaleUp() }
      },
      onExit: () => {
        slot.deep = false
        // A primary is restarted in place (same slot); an extra one is gone for good.
        if (!primary || this.closing || slot.stopping) this.remove(slot)
      },
      onLog: this.opts.onLog,
    })
    this.slots.push(slot)
    return slot
  }

  private remove (slot: Slot): void {
    const i = this.slots.indexOf(slot)
    if (i >= 0) this.slots.splice(i, 1)
  }

  /** A worker reports more due rows than it can hold: start one more, up to maxWorkers. */
  private scaleUp (): void {
    if (this.closing || this.workers >= this.maxWorkers) return
    this.scaleUps++
    this.spawn(false)
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
   * Drains one worker through its lifecycle: it stops claiming, lets requests in flight finish
   * for up to `graceMs` (then abandons them and releases their claims for another worker or
   * node), reports `stopped`, and is terminated (at the latest 5 s after the grace period).
   */
  private async stopSlot (s: Slot, graceMs: number): Promise<void> {
    s.stopping = true
    s.deep = false
    // A worker that ends meanwhile fails the ask: the drain is over either way.
    await s.worker.close(() => s.worker.channel.ask('stop', { graceMs }, graceMs + 5000), graceMs + 5000)
    this.remove(s)
  }

  /**
   * Outbox rows a shard of this node committed claimed for it: to the primary worker, which
   * sends them without a claim (docs/architecture.md "Durability", the outbox). Rows that cannot be
   * taken (the pool is closing, the worker is gone or full) keep their claim until its lease
   * lapses, then any node's pool sends them.
   */
  hand (rows: ClaimedDelivery[]): void {
    if (this.closing || rows.length === 0) return
    this.handed += rows.length
    this.primary.worker.channel.tell('hand', { rows })
  }

  /** Test hook: ends the primary worker as a crash would (it is restarted). */
  async crash (): Promise<void> { await this.primary.worker.crash() }

  /** Graceful stop of every worker (see stopSlot). */
  async close (graceMs = 3000): Promise<void> {
    if (this.closing) return
    this.closing = true
    clearInterval(this.retireTimer)
    await Promise.all([...this.slots].map(s => s.stopped ?? (s.stopped = this.stopSlot(s, graceMs))))
  }
}
