import type { Logger } from 'pino'
import type { Sql } from './db/connect.js'
import { pruneMetering, writeMeterBatch, type MeterRow } from './db/metering.js'
import { touchKeys } from './db/keys.js'

const MAX_BUFFER = 200_000

/**
 * Records every request off the response's critical path (issue 2 item 10): rows are
 * buffered in memory and written in one batch per second (or sooner when many queue).
 * Key last_used_at times ride along. Rows survive a failed flush up to MAX_BUFFER.
 */
export class Metering {
  private buf: MeterRow[] = []
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
    this.timer = setInterval(() => { void this.flush() }, intervalMs)
    this.timer.unref()
    const prune = () => { pruneMetering(sql, retentionDays).catch(() => {}) }
    this.pruneTimer = setInterval(prune, 3600_000)
    this.pruneTimer.unref()
  }

  record (row: MeterRow): void {
    this.buf.push(row)
    if (this.buf.length >= 5000 && this.flushing === null) void this.flush()
  }

  /**
   * Writes everything recorded before the call: a flush in progress took its rows earlier, so
   * it is waited for and the rest written after it; concurrent callers share each flush.
   */
  async flush (): Promise<void> {
    while (this.flushing) await this.flushing
    if (this.buf.length === 0 && this.lastUsed.size === 0) return
    const rows = this.buf
    this.buf = []
    const used = [...this.lastUsed]
    this.lastUsed.clear()
    this.flushing = (async () => {
      // Two independent writes, each retried on its own: a failed touch must not re-insert
      // rows that were already written (double metering), nor a failed batch lose key uses.
      let written = true
      try {
        await writeMeterBatch(this.sql, rows)
      } catch (err) {
        written = false
        this.log.warn({ err: String(err), rows: rows.length }, 'metering flush failed; will retry')
        this.buf = rows.concat(this.buf)
        if (this.buf.length > MAX_BUFFER) {
          this.dropped += this.buf.length - MAX_BUFFER
          this.buf = this.buf.slice(this.buf.length - MAX_BUFFER)
        }
      }
      try {
        await touchKeys(this.sql, used)
      } catch (err) {
        this.log.warn({ err: String(err), keys: used.length }, 'last_used_at flush failed; will retry')
        for (const [id, at] of used) if ((this.lastUsed.get(id) ?? 0) < at) this.lastUsed.set(id, at)
      }
      this.flushing = null
      // Rows that piled up meanwhile (a busy second) go at once, not at the next tick; after a
      // failure the timer paces the retries.
      if (written && this.buf.length >= 5000) void this.flush()
    })()
    return this.flushing
  }

  /**
   * Waits until the rows buffered for `accountId` are written (GET /v1/usage/summary reads the
   * rollup): nothing to do, and no round trip, when none are buffered or being written.
   */
  async flushFor (accountId: number): Promise<void> {
    if (this.flushing) await this.flushing
    if (this.buf.some(r => r.account_id === accountId)) await this.flush()
  }

  async close (): Promise<void> {
    clearInterval(this.timer)
    clearInterval(this.pruneTimer)
    await this.flush()
    if (this.buf.length > 0) await this.flush()
  }
}
