import { parentPort, workerData } from 'node:worker_threads'
import type { Logger } from 'pino'
import { createLogger } from '../log.js'
import { Agent, request } from 'undici'
import type { Config } from '../config.js'
import { connect, type Sql } from '../db/connect.js'
import { claimDueDeliveries, disableDelivery, recordAttempt, recordAttempts, releaseClaims, type AttemptRecord, type ClaimedDelivery } from '../db/webhooks.js'
import {
  basicAuthOf, CLAIM_LEASE_S, DELIVERY_TIMEOUT_MS, checkDestination, deliveryHeaders, describeError, guardedConnector,
  outcomeOf, type AttemptResult,
} from './delivery.js'
import { GroupCommit } from './group-commit.js'
import { observeDelivery, snapshotStats, type StatsSnapshot } from '../worker-stats.js'

/** What the delivery worker is started with (src/actors/delivery-pool.ts). */
export interface DeliveryInit {
  databaseUrl: string
  config: Config
  version: string
}

/** Messages from the main thread. */
export type DeliveryCommand = { type: 'wake' } | { type: 'stop'; graceMs: number } | { type: 'stats'; id: number }
/** Messages to the main thread. `backlog`: whether claims fill their limit (more rows are due than this worker holds). */
export type DeliveryReport = { type: 'ready' } | { type: 'stopped' } | { type: 'stats'; id: number; stats: StatsSnapshot } | { type: 'backlog'; deep: boolean }

/** Rows claimed per query; a full batch means more are due, so the loop claims again at once. */
const BATCH = 200
/** Requests in flight at once. */
const MAX_IN_FLIGHT = 64
/** Claimed rows held at most (in flight + waiting): all of them finish well inside the lease. */
const MAX_HELD = 256
/** Idle poll: catches retries coming due and rows of nodes whose NOTIFY we missed. */
const POLL_MS = 250
/** At most this much of a failing receiver's answer is kept in last_error. */
const SNIPPET_BYTES = 200

interface QueuedAttempt { a: AttemptRecord; resolve: () => void; reject: (e: unknown) => void }

/**
 * Attempts are written in batches (issue 13): while one batch's statement runs, new attempts
 * queue, and the next batch is ONE statement (recordAttempts) however many it holds; no timer
 * window, so an idle pool adds no delay. A failed batch is retried row by row, each in its own
 * transaction, so one bad row never fails or loses another. Callers resolve after the write.
 */
class AttemptWriter {
  private queue: QueuedAttempt[] = []
  private running: Promise<void> | null = null
  stats = { statements: 0, attempts: 0 }

  constructor (private readonly sql: Sql) {}

  record (a: AttemptRecord): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ a, resolve, reject })
      this.running ??= this.drain()
    })
  }

  async idle (): Promise<void> {
    while (this.running !== null) await this.running
  }

  private async drain (): Promise<void> {
    // Let this turn's attempts join the first batch.
    await new Promise<void>(resolve => setImmediate(resolve))
    while (this.queue.length > 0) {
      const batch = this.queue
      this.queue = []
      try {
        await recordAttempts(this.sql, batch.map(q => q.a))
        this.stats.statements++
        this.stats.attempts += batch.length
        for (const q of batch) q.resolve()
      } catch (err) {
        if (batch.length === 1) { batch[0].reject(err); continue }
        for (const q of batch) {
          try { await this.sql.begin(tx => recordAttempt(tx, q.a)); q.resolve() } catch (e) { q.reject(e) }
        }
      }
    }
    this.running = null
  }
}

/**
 * The delivery loop (DESIGN.md 2 and 4): claims due outbox rows with a lease, POSTs them through
 * the SSRF-guarded agent, records every attempt, and reschedules failures. Wakes on NOTIFY
 * webhook_deliveries (sql/0005), on a full batch, on a retry coming due, and every POLL_MS.
 * At-least-once: a row is marked delivered only after a 2xx is recorded; if the process dies
 * first, the lease expires and any node sends it again with the same X-Service-Delivery.
 */
class DeliveryLoop {
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
  private readonly stopSignal = new AbortController()
  /** Controllers of the requests in flight, aborted together on stop. */
  private readonly live = new Set<AbortController>()
  private idleWaiters: Array<() => void> = []

  private readonly attempts: AttemptWriter
  /** Last `backlog` state reported to the pool. */
  private deep = false

  constructor (
    private readonly sql: Sql,
    private readonly commit: GroupCommit,
    private readonly agent: Agent,
    private readonly cfg: { allowlist: readonly string[]; scale: number; userAgent: string },
    private readonly log: Logger,
    private readonly report: (m: DeliveryReport) => void = () => {},
  ) {
    this.attempts = new AttemptWriter(sql)
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
        const rows = await claimDueDeliveries(this.sql, limit, CLAIM_LEASE_S)
        full = rows.length === limit
        this.moreDue = full
        if (full !== this.deep) { this.deep = full; this.report({ type: 'backlog', deep: full }) }
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
      this.inFlight++
      this.deliver(d)
        .catch((err: unknown) => this.log.error({ err, delivery: d.id }, 'recording a webhook attempt failed; the lease will expire and it is retried'))
        .finally(() => {
          this.inFlight--
          this.held.delete(d.id)
          if (this.inFlight === 0) for (const w of this.idleWaiters.splice(0)) w()
          if (!this.stopping) {
            this.pump()
            // The last claim was capped (more rows were due) and half the room is free: claim
            // again now. Waiting for the next poll here capped a backlog's drain at ~MAX_HELD
            // rows per POLL_MS (bench webhooks: ~1000/s); wake() coalesces with a running claim.
            if (this.moreDue && this.waiting.length === 0 && this.held.size <= MAX_HELD / 2) this.wake()
          }
        })
    }
  }

  private async deliver (d: ClaimedDelivery): Promise<void> {
    if (d.hook_active === false) {
      await this.commit.run(tx => disableDelivery(tx, d.id, 'webhook deleted or disabled before delivery'))
      return
    }
    const attempt = d.attempts + 1
    const attemptedAt = new Date()
    const result = await this.attempt(d)
    if (result === null) return // stopped mid-request: the claim is released, nothing recorded
    const o = outcomeOf(result, attempt, { scale: this.cfg.scale, registered: d.webhook_id !== null })
    observeDelivery(o.status === 'pending' ? 'retry' : o.status, (result.latencyMs ?? 0) / 1000) // metrics
    await this.attempts.record({
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
    })
    if (o.status !== 'delivered') {
      this.log.info({ delivery: d.id, attempt, status: o.status, code: result.statusCode, error: result.error }, 'webhook attempt failed')
    }
    // Short (scaled) retries would otherwise wait for the next idle poll.
    if (o.status === 'pending' && o.delayMs !== null && o.delayMs < POLL_MS) setTimeout(this.wake, o.delayMs + 1)
  }

  /** One POST. Null when the pool is stopping and the request was abandoned. */
  private async attempt (d: ClaimedDelivery): Promise<AttemptResult | null> {
    const dest = checkDestination(d.url, this.cfg.allowlist)
    if ('error' in dest) return { statusCode: null, latencyMs: null, error: dest.error, permanent: true }
    const t = Math.floor(Date.now() / 1000)
    const started = performance.now()
    const latency = () => Math.round(performance.now() - started)
    // One controller and one timer per request (issue 13), instead of AbortSignal.any over a
    // timeout signal and the long-lived stop signal: cheaper, and nothing is registered on the
    // stop signal per request. The timeout's reason is a TimeoutError, as AbortSignal.timeout's.
    const ac = new AbortController()
    const signal = ac.signal
    const timer = setTimeout(() => ac.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')), DELIVERY_TIMEOUT_MS)
    this.live.add(ac)
    try {
      dest.url.hash = ''
      const headers = deliveryHeaders(d, t, this.cfg.userAgent)
      const auth = basicAuthOf(dest.url)
      if (auth !== null) headers.authorization = auth
      const res = await request(dest.url, {
        method: 'POST',
        body: d.body,
        headers,
        dispatcher: this.agent,
        signal,
      })
      const code = res.statusCode
      const snippet = await readSnippet(res.body)
      const ms = latency()
      if (code >= 200 && code < 300) return { statusCode: code, latencyMs: ms, error: null }
      let error = `HTTP ${code}`
      if (code >= 300 && code < 400) error += `: redirect${res.headers.location ? ` to ${String(res.headers.location).slice(0, 200)}` : ''} not followed`
      else if (snippet) error += `: ${snippet}`
      return { statusCode: code, latencyMs: ms, error }
    } catch (err) {
      if (this.stopSignal.signal.aborted) return null
      return { statusCode: null, latencyMs: latency(), error: describeError(err) }
    } finally {
      clearTimeout(timer)
      this.live.delete(ac)
    }
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
    const abandoned = [...this.held]
    this.stopSignal.abort()
    for (const ac of this.live) ac.abort(this.stopSignal.signal.reason)
    await this.commit.idle()
    await this.attempts.idle()
    await releaseClaims(this.sql, abandoned).catch(() => {})
  }
}

/** Reads up to SNIPPET_BYTES of a response for last_error and discards the rest. */
async function readSnippet (body: AsyncIterable<Buffer> & { destroy?: () => void }): Promise<string> {
  const chunks: Buffer[] = []
  let n = 0
  try {
    for await (const c of body) {
      chunks.push(c)
      n += c.length
      if (n >= SNIPPET_BYTES) break
    }
  } catch { /* a body cut short is still a failure we already know the status of */ }
  return Buffer.concat(chunks).subarray(0, SNIPPET_BYTES).toString('utf8').replace(/\s+/g, ' ').trim()
}

// ---- worker entry -------------------------------------------------------------------------

const init = workerData as DeliveryInit
const config = init.config
const log = createLogger(config.logLevel, { base: { worker: 'delivery' }, secrets: [config.adminToken ?? '', config.jwtSecret ?? '', config.metricsToken ?? ''] })
const sql = connect(init.databaseUrl, { max: 3 })
const agent = new Agent({
  connect: guardedConnector({ allowlist: config.webhookAllowlist, timeoutMs: DELIVERY_TIMEOUT_MS }),
  headersTimeout: DELIVERY_TIMEOUT_MS,
  bodyTimeout: DELIVERY_TIMEOUT_MS,
  connections: 16,
})
const loop = new DeliveryLoop(sql, new GroupCommit(sql), agent, {
  allowlist: config.webhookAllowlist,
  scale: config.webhookRetryScale,
  userAgent: `genjobs-webhooks/${init.version}`,
}, log, (m) => parentPort!.postMessage(m))

const listener = await sql.listen('webhook_deliveries', () => loop.wake()).catch((err: unknown) => {
  log.warn({ err }, 'LISTEN webhook_deliveries failed; polling only')
  return null
})

parentPort!.on('message', (m: DeliveryCommand) => {
  if (m.type === 'wake') loop.wake()
  else if (m.type === 'stats') parentPort!.postMessage({ type: 'stats', id: m.id, stats: snapshotStats() } satisfies DeliveryReport)
  else if (m.type === 'stop') {
    void (async () => {
      try {
        await loop.stop(m.graceMs)
        await listener?.unlisten().catch(() => {})
        await agent.destroy().catch(() => {})
        await sql.end({ timeout: 2 })
      } catch (err) {
        log.error({ err }, 'delivery worker stop failed')
      }
      parentPort!.postMessage({ type: 'stopped' } satisfies DeliveryReport)
    })()
  }
})

loop.wake()
parentPort!.postMessage({ type: 'ready' } satisfies DeliveryReport)
