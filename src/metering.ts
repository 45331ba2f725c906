import type { Logger } from 'pino'
import { randomBytes } from 'node:crypto'
import { within, type Sql } from './db/connect.js'
import { EndpointTable, MeterColumns, pruneMetering, writeMeterBatch } from './db/metering.js'
import { touchKeys } from './db/keys.js'

const MAX_BUFFER = 200_000
/** A flush's write not settled by then fails (and its rows are kept for the next flush). */
const FLUSH_TIMEOUT_MS = 30_000
/**
 * Rows that start a flush before the 1 s timer: each flush has a fixed cost (the
 * transaction, the rollup of every (account, endpoint) pair it holds: ~1000 upserts under
 * job-get), so a flush every 5000 rows cost ~3.3 µs a row here and ~10 µs in PostgreSQL
 * against ~1.2-2 and ~6-9 µs for 20,000-row flushes (node dist/bench/metering-flush.js).
 * ~1.7 MB of columns.
 */
const EARLY_FLUSH_ROWS = 20_000

/**
 * Records every request off the response's critical path: rows go into a
 * preallocated columnar buffer (no object per request) and are written with COPY in
 * one batch per second (or sooner when many queue). Two buffers alternate: one fills while the
 * other is written. Key last_used_at times ride along. Rows survive a failed flush up to
 * MAX_BUFFER.
 */
export class Metering {
  /** The request-id prefix of this process: generated ids are `req_<prefix><counter base 36>`. */
  readonly reqPrefix = randomBytes(4).toString('hex')
  readonly endpoints = new EndpointTable()
  private buf: MeterColumns
  private spare: MeterColumns | null
  /** The rows being written, while `flushing`. */
  private writing: MeterColumns | null = null
  private flushing: Promise<void> | null = null
  private readonly timer: NodeJS.Timeout
  private readonly pruneTimer: NodeJS.Timeout
  dropped = 0

  constructor (
    private readonly sql: Sql,
    private readonly log: Logger,
    private readonly lastUsed: Map<number, number>,
    retentionDays: number,
    intervalMs = 1000,
  ) {
    this.buf = new MeterColumns(8192, this.endpoints, this.reqPrefix)
    this.spare = new MeterColumns(8192, this.endpoints, this.reqPrefix)
    this.timer = setInterval(() => { void this.flushLocal() }, intervalMs)
    this.timer.unref()
    const prune = () => { pruneMetering(sql, retentionDays).catch(() => {}) }
    this.pruneTimer = setInterval(prune, 3600_000)
    this.pruneTimer.unref()
  }

  /** Rows held and not yet being written. */
  get pending (): number { return this.buf.length }

  /**
   * Records one request. `ep` from `endpoints.id(method, path)` (a route's, interned once), or
   * -1 with `method` and `url` for requests that matched no route. `account`/`key` NaN for
   * none. `reqNum` the counter of a generated request id, or NaN with `reqStr` the client's.
   */
  push (
    atMs: number, account: number, key: number, ep: number, method: string | null, url: string | null, status: number, credits: number,
    latencyMs: number, reqNum: number, reqStr: string | null
  ): void {
    this.buf.push(atMs, account, key, ep, method, url, status, credits, latencyMs, reqNum, reqStr)
    if (this.buf.length >= EARLY_FLUSH_ROWS && this.flushing === null) void this.flushLocal()
  }

  /** Writes everything recorded before the call (ThreadedMetering: on every front-end thread). */
  flush (): Promise<void> { return this.flushLocal() }

  /**
   * Writes everything this thread recorded before the call: a flush in progress took its rows
   * earlier, so it is waited for and the rest written after it; concurrent callers share each
   * flush.
   */
  protected async flushLocal (): Promise<void> {
    while (this.flushing) await this.flushing
    if (this.buf.length === 0 && this.lastUsed.size === 0) return
    const rows = this.buf
    this.buf = this.spare ?? new MeterColumns(8192, this.endpoints, this.reqPrefix)
    this.spare = null
    this.writing = rows
    const used = [...this.lastUsed]
    this.lastUsed.clear()
    this.flushing = (async () => {
      // Two independent writes, each retried on its own: a failed touch must not re-insert
      // rows that were already written (double metering), nor a failed batch lose key uses.
      let written = true
      try {
        // Bounded: a write lost in the driver would stop this thread's metering for good (and hang
        // /v1/usage/summary, which waits for it). Past 30 s its outcome is unknown; it is retried.
        await within(writeMeterBatch(this.sql, rows), FLUSH_TIMEOUT_MS, 'metering flush')
      } catch (err) {
        written = false
        this.log.warn({ err: String(err), rows: rows.length }, 'metering flush failed; will retry')
        // The failed rows first, then what arrived meanwhile; the oldest go past MAX_BUFFER.
        const total = rows.length + this.buf.length
        if (total > MAX_BUFFER) this.dropped += total - MAX_BUFFER
        const merged = new MeterColumns(Math.min(MAX_BUFFER, Math.max(8192, total)), this.endpoints, this.reqPrefix)
        const skip = Math.max(0, total - MAX_BUFFER)
        if (skip < rows.length) merged.append(rows, skip)
        merged.append(this.buf, Math.max(0, skip - rows.length))
        this.buf = merged
      }
      this.writing = null
      rows.reset()
      this.spare = rows
      try {
        await within(touchKeys(this.sql, used), FLUSH_TIMEOUT_MS, 'last_used_at flush')
      } catch (err) {
        this.log.warn({ err: String(err), keys: used.length }, 'last_used_at flush failed; will retry')
        for (const [id, at] of used) if ((this.lastUsed.get(id) ?? 0) < at) this.lastUsed.set(id, at)
      }
      this.flushing = null
      // Rows that piled up meanwhile (a busy second) go at once, not at the next tick; after a
      // failure the timer paces the retries.
      if (written && this.buf.length >= EARLY_FLUSH_ROWS) void this.flushLocal()
    })()
    return this.flushing
  }

  /**
   * Waits until this thread's rows for `accountId` are written (GET /v1/usage/summary reads the
   * rollup): nothing to do, and no round trip, when none are buffered or being written. Rows
   * a flush in progress holds (a timer's flush may take them while the caller waits) are
   * waited for; a failed flush puts its rows back, tried again twice before giving up.
   */
  async flushFor (accountId: number): Promise<void> {
    for (let tries = 0; tries < 3; tries++) {
      if (this.writing !== null && this.writing.hasAccount(accountId)) await this.flushing
      else if (this.buf.hasAccount(accountId)) await this.flushLocal()
      else return
    }
  }

  async close (): Promise<void> {
    clearInterval(this.timer)
    clearInterval(this.pruneTimer)
    await this.flushLocal()
    if (this.buf.length > 0) await this.flushLocal()
  }
}
