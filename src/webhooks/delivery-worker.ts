import { parentPort, workerData } from 'node:worker_threads'
import type { Logger } from 'pino'
import { createLogger } from '../log.js'
import { connect, containDriverFaults, isDbUnavailable, within, type Sql } from '../db/connect.js'
import { claimDueDeliveries, disableDelivery, recordAttempt, recordAttempts, releaseClaims, type ClaimedDelivery } from '../db/webhooks.js'
import { AttemptWriter } from './delivery-attempts.js'
import { DELIVERY_TIMEOUT_MS, describeError, outcomeOf, type AttemptResult } from './delivery.js'
import { deliveryHeaderList } from './signing.js'
import { guardedConnector } from '../net/dns-guard.js'
import { Sender } from './delivery-send.js'
import { MAX_CONNECTIONS, PIPELINING, type Connector } from '../net/h1-client.js'
import { GroupCommit } from '../shard/group-commit.js'
import { observeDelivery, snapshotStats } from '../worker-stats.js'
import { Channel } from '../threads/channel.js'
import type { DeliveryInit, FromDelivery, ToDelivery } from './protocol.js'


/** Rows claimed per query; a full batch means more are due, so the loop claims again at once. */
const BATCH = 200
/** Requests in flight at once: as many as one origin's sockets take (src/net/h1-client.ts). */
const MAX_IN_FLIGHT = MAX_CONNECTIONS * PIPELINING
/** Claimed rows held at most (in flight + waiting): all of them finish well inside the lease. */
const MAX_HELD = 256
/** Idle poll: catches retries coming due and rows of nodes whose NOTIFY we missed. */
const POLL_MS = 250
/** A claim or an attempt write not settled by then fails as DB_STALLED (and is retried). */
const STATEMENT_TIMEOUT_MS = 10_000

/**
 * The delivery loop (docs/architecture.md "Threads"): claims due outbox rows with a lease, POSTs them through
 * the SSRF-guarded connector (src/net/h1-client.ts), records every attempt, and reschedules failures. Wakes on NOTIFY
 * webhook_deliveries (sql/0005), on a full batch, on a retry coming due, and every POLL_MS.
 * At-least-once: a row is marked delivered only after a 2xx is recorded; if the process dies
 * first, the lease expires and any node sends it again with the same X-Service-Delivery.
 * A request slot is free as soon as the answer arrives; the claim is held until the attempt is
 * recorded (`held` bounds both).
 */
class DeliveryLoop {
  /** Claimed rows not yet recorded (waiting, in flight, or being recorded). */
  private readonly held = new Set<string>()
  private readonly waiting: ClaimedDelivery[] = []
  private inFlight = 0
  private polling = false
  /** The last claim filled its limit: more rows were probably due. */
  private moreDue = false
  private claimErrors = 0
  private again = false
  private stopping = false
  private timer: NodeJS.Timeout | null = null
  private readonly sweep: NodeJS.Timeout
  private idleWaiters: Array<() => void> = []
  private readonly sender: Sender
  private readonly attempts: AttemptWriter
  /** Last `backlog` state reported to the pool. */
  private deep = false

  constructor (
    private readonly sql: Sql,
    private readonly commit: GroupCommit,
    connector: Connector,
    private readonly cfg: { allowlist: readonly string[]; scale: number; userAgent: string; leaseSeconds: number },
    private readonly log: Logger,
    /** Tells the pool whether claims fill their limit (a deep backlog: it may start another worker). */
    private readonly reportBacklog: (deep: boolean) => void = () => {},
  ) {
    this.attempts = new AttemptWriter({
      // Bounded (within): a statement lost in the driver must not stop every later record.
      batch: list => within(recordAttempts(sql, list), STATEMENT_TIMEOUT_MS, 'attempt batch'),
      one: a => within(sql.begin(tx => recordAttempt(tx, a)), STATEMENT_TIMEOUT_MS, 'attempt').then(() => {}),
      busy: () => this.inFlight > 0 && !this.stopping,
      unavailable: isDbUnavailable,
      // Retried while well inside the claim's lease: past it another worker may send it again anyway.
      retryForMs: cfg.leaseSeconds * 1000 / 2,
    })
    this.sender = new Sender(connector, cfg.allowlist)
    // One timer for every request's deadline (DELIVERY_TIMEOUT_MS, checked each second).
    this.sweep = setInterval(() => this.sender.sweep(), 1000)
    this.sweep.unref()
  }

  /**
   * Rows this node committed claimed for this worker (docs/architecture.md "Durability", the outbox):
   * held and sent like rows of its own claim. What it cannot hold (stopping, or MAX_HELD held)
   * is released at once, for any pool to claim.
   */
  take (rows: ClaimedDelivery[]): void {
    const over: string[] = []
    for (const r of rows) {
      if (this.held.has(r.id)) continue
      if (this.stopping || this.held.size >= MAX_HELD) { over.push(r.id); continue }
      this.held.add(r.id)
      this.waiting.push(r)
    }
    if (over.length > 0) {
      // More rows are due than this worker holds: claim again as soon as half its room is free
      // (settle), as after a claim that filled its limit, and claim once they are released.
      this.moreDue = true
      releaseClaims(this.sql, over).then(this.wake, (err: unknown) => this.log.warn({ err, rows: over.length }, 'releasing handed webhook deliveries failed; they come due when their lease lapses'))
    }
    this.pump()
  }

  /** Claim now (or right after the claim in progress). */
  wake = (): void => {
    if (this.stopping) return
    if (this.polling) { this.again = true; return }
    if (this.timer) { clearTimeout(this.timer); this.timer = null }
    void this.poll()
  }

  private schedule (ms: number): void {
    if (this.stopping) return
    if (this.timer) clearTimeout(this.timer)
    this.timer = setTimeout(() => { this.timer = null; this.wake() }, ms)
  }

  private async poll (): Promise<void> {
    this.polling = true
    this.again = false
    let full = false
    try {
      const room = MAX_HELD - this.held.size
      if (room > 0) {
        const limit = Math.min(BATCH, room)
        // Bounded: a claim lost in the driver would leave `polling` set and the worker idle for
        // good. Rows a late claim took come due again when their lease lapses.
        const rows = await within(claimDueDeliveries(this.sql, limit, this.cfg.leaseSeconds), STATEMENT_TIMEOUT_MS, 'claim')
        full = rows.length === limit
        this.moreDue = full
        if (full !== this.deep) { this.deep = full; this.reportBacklog(full) }
        for (const r of rows) { this.held.add(r.id); this.waiting.push(r) }
        if (this.stopping) { await this.releaseWaiting(); return }
        this.pump()
      }
      this.claimErrors = 0
    } catch (err) {
      // Database unreachable: back off (up to 5 s) instead of logging every 250 ms.
      if (this.claimErrors++ === 0) this.log.error({ err }, 'claiming webhook deliveries failed')
    } finally {
      this.polling = false
    }
    if (this.stopping) return
    if (this.claimErrors > 0) this.schedule(Math.min(5000, POLL_MS * 2 ** this.claimErrors))
    else if ((full && this.held.size < MAX_HELD) || this.again) setImmediate(this.wake)
    else this.schedule(POLL_MS)
  }

  private pump (): void {
    while (this.inFlight < MAX_IN_FLIGHT && this.waiting.length > 0 && !this.stopping) {
      const d = this.waiting.shift() as ClaimedDelivery
      if (d.hook_active === false) {
        this.settle(d.id, this.commit.run(tx => disableDelivery(tx, d.id, 'webhook deleted or disabled before delivery')))
        continue
      }
      this.send(d)
    }
  }

  /** The claim of `id` ends when `done` settles (its attempt or state is written). */
  private settle (id: string, done: Promise<void>): void {
    done
      .catch((err: unknown) => this.log.error({ err, delivery: id }, 'recording a webhook attempt failed; the lease will expire and it is retried'))
      .finally(() => {
        this.held.delete(id)
        // The last claim was capped (more rows were due) and half the room is free: claim
        // again now. Waiting for the next poll here capped a backlog's drain at ~MAX_HELD
        // rows per POLL_MS (bench webhooks: ~1000/s); wake() coalesces with a running claim.
        if (!this.stopping && this.moreDue && this.waiting.length === 0 && this.held.size <= MAX_HELD / 2) this.wake()
      })
  }

  /** One POST; its result is recorded (a refused URL fails at once, without a request). */
  private send (d: ClaimedDelivery): void {
    const attemptedAt = new Date()
    const dest = this.sender.destination(d.url)
    if ('error' in dest) {
      this.finish(d, attemptedAt, { statusCode: null, latencyMs: null, error: dest.error, permanent: true })
      return
    }
    const headers = deliveryHeaderList(d, Math.floor(attemptedAt.getTime() / 1000), this.cfg.userAgent, dest.auth)
    const started = performance.now()
    this.inFlight++
    this.sender.send(dest, headers, d.body, (r) => {
      this.inFlight--
      if (this.inFlight === 0) for (const w of this.idleWaiters.splice(0)) w()
      // Stopped mid-request: nothing is recorded and the claim is released by stop().
      if (r.cause !== undefined && this.stopping) return
      const latencyMs = Math.round(performance.now() - started)
      this.finish(d, attemptedAt, r.cause !== undefined
        ? { statusCode: null, latencyMs, error: describeError(r.cause) }
        : { statusCode: r.statusCode, latencyMs, error: r.error })
      if (!this.stopping) this.pump()
    })
  }

  private finish (d: ClaimedDelivery, attemptedAt: Date, result: AttemptResult): void {
    const attempt = d.attempts + 1
    const o = outcomeOf(result, attempt, { scale: this.cfg.scale, registered: d.webhook_id !== null })
    observeDelivery(o.status === 'pending' ? 'retry' : o.status, (result.latencyMs ?? 0) / 1000) // metrics
    this.settle(d.id, this.attempts.record({
      deliveryId: d.id,
      webhookId: d.webhook_id,
      attempt,
      attemptedAt,
      statusCode: result.statusCode,
      latencyMs: result.latencyMs,
      error: result.error,
      status: o.status,
      delayMs: o.delayMs,
      disableWebhook: o.disableWebhook,
    }))
    if (o.status !== 'delivered') {
      this.log.info({ delivery: d.id, attempt, status: o.status, code: result.statusCode, error: result.error }, 'webhook attempt failed')
    }
    // Short (scaled) retries would otherwise wait for the next idle poll.
    if (o.status === 'pending' && o.delayMs !== null && o.delayMs < POLL_MS) setTimeout(this.wake, o.delayMs + 1)
  }

  private async releaseWaiting (): Promise<void> {
    const ids = this.waiting.splice(0).map(d => d.id)
    for (const id of ids) this.held.delete(id)
    await releaseClaims(this.sql, ids)
  }

  /**
   * Graceful stop: no new claims; requests in flight get `graceMs` to finish and be recorded,
   * then are abandoned; every claim not recorded is released so another pool takes it at once.
   */
  async stop (graceMs: number): Promise<void> {
    this.stopping = true
    clearInterval(this.sweep)
    if (this.timer) { clearTimeout(this.timer); this.timer = null }
    while (this.polling) await new Promise(resolve => setTimeout(resolve, 5))
    await this.releaseWaiting()
    if (this.inFlight > 0) {
      let timer: NodeJS.Timeout | undefined
      await Promise.race([
        new Promise<void>(resolve => this.idleWaiters.push(resolve)),
        new Promise<void>(resolve => { timer = setTimeout(resolve, graceMs) }),
      ])
      clearTimeout(timer)
    }
    this.sender.close(new Error('delivery worker stopping'))
    await this.commit.idle()
    await this.attempts.idle()
    // What is still held was abandoned mid-request or failed to record: hand it back.
    await releaseClaims(this.sql, [...this.held]).catch(() => {})
  }
}

// ---- worker entry -------------------------------------------------------------------------

const init = workerData as DeliveryInit
const config = init.config
const log = createLogger(config.logLevel, { base: { worker: 'delivery' }, secrets: [config.adminToken ?? '', config.jwtSecret ?? '', config.metricsToken ?? ''] })
containDriverFaults((msg, err) => log.error({ err }, msg)) // An outage never kills the worker
const sql = connect(init.databaseUrl, { max: 3, stallMs: init.config.dbStallTimeoutMs })
const connector = guardedConnector({ allowlist: config.webhookAllowlist, timeoutMs: DELIVERY_TIMEOUT_MS })
let listener: { unlisten: () => Promise<void> } | null = null
const main = Channel.over<FromDelivery, ToDelivery>(parentPort!, {
  peer: 'main thread',
  onTell: (m) => { if (m.tag === 'hand') loop.take(m.body.rows) },
  handlers: {
    stats: async () => snapshotStats(),
    stop: async ({ graceMs }) => {
      try {
        await loop.stop(graceMs)
        await listener?.unlisten().catch(() => {})
        await sql.end({ timeout: 2 })
      } catch (err) {
        log.error({ err }, 'delivery worker stop failed')
      }
      return null
    },
  },
})
const loop = new DeliveryLoop(sql, new GroupCommit(sql), connector, {
  allowlist: config.webhookAllowlist,
  scale: config.webhookRetryScale,
  userAgent: `genjobs-webhooks/${init.version}`,
  leaseSeconds: init.leaseSeconds,
}, log, (deep) => main.tell('backlog', { deep }))

listener = await sql.listen('webhook_deliveries', () => loop.wake()).catch((err: unknown) => {
  log.warn({ err }, 'LISTEN webhook_deliveries failed; polling only')
  return null
})

loop.wake()
main.tell('ready', {})
