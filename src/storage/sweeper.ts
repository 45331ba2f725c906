import type { Logger } from 'pino'
import type { Sql } from '../db/connect.js'
import type { Storage } from './storage.js'
import { deleteUploads, expiredUploads } from '../db/uploads.js'

export interface SweeperOptions {
  /** Time between sweeps (default one hour). */
  intervalMs?: number
  /** Rows handled per query. */
  batch?: number
}

/**
 * Deletes expired uploads (video uploads, about 90 days; docs/api.md "Uploads" retention): the file
 * first, then the row, so a crash in between leaves a row whose file is already gone and the
 * next sweep finishes it. Deletes are idempotent, so several nodes may sweep at once.
 * Runs once at start and then every `intervalMs` on an unref'd timer.
 */
export class UploadSweeper {
  private timer: NodeJS.Timeout | null = null
  private running: Promise<number> | null = null
  private stopped = false
  private readonly intervalMs: number
  private readonly batch: number

  constructor (private readonly sql: Sql, private readonly storage: Storage, private readonly log: Logger, opts: SweeperOptions = {}) {
    this.intervalMs = opts.intervalMs ?? 60 * 60 * 1000
    this.batch = opts.batch ?? 500
  }

  start (): void {
    if (this.timer || this.stopped) return
    void this.tick()
    this.timer = setInterval(() => { void this.tick() }, this.intervalMs)
    this.timer.unref()
  }

  private async tick (): Promise<void> {
    try {
      const n = await this.sweep()
      if (n > 0) this.log.info({ deleted: n }, 'expired uploads deleted')
    } catch (err) {
      this.log.warn({ err }, 'upload sweep failed; retrying at the next interval')
    }
  }

  /** One pass: deletes every upload expired at `now`; returns how many. One pass at a time. */
  sweep (now: Date = new Date()): Promise<number> {
    if (this.running) return this.running
    this.running = this.sweepNow(now).finally(() => { this.running = null })
    return this.running
  }

  private async sweepNow (now: Date): Promise<number> {
    let total = 0
    while (!this.stopped) {
      const rows = await expiredUploads(this.sql, now, this.batch)
      if (rows.length === 0) break
      const done: number[] = []
      for (const r of rows) {
        try {
          await this.storage.delete(r.key)
          done.push(r.id)
        } catch (err) {
          this.log.warn({ err, key: r.key }, 'could not delete expired upload; kept for the next sweep')
        }
      }
      total += await deleteUploads(this.sql, done)
      if (rows.length < this.batch || done.length < rows.length) break
    }
    return total
  }

  /** Stops the timer and waits for a sweep in progress. */
  async stop (): Promise<void> {
    this.stopped = true
    if (this.timer) { clearInterval(this.timer); this.timer = null }
    if (this.running) await this.running.catch(() => {})
  }
}
