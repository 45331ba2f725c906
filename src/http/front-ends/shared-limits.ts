import type { RateDecision } from '../rate-limit.js'
import { bucketKey, SharedTable, type SharedTableInit } from '../../threads/shared-table.js'

/**
 * The exact counters every front-end thread shares, in shared memory: the
 * per-key rate windows and the per-account SSE stream counts. With REDIS_URL the rate window
 * is Redis's (across nodes); the stream counts stay per node, as before.
 */
export interface SharedLimitsInit { rate: SharedTableInit; streams: SharedTableInit }

/** Rate windows kept at once (keys seen in the last minute); 256 bytes each. */
export const RATE_SLOTS = 32768
/** Accounts with open SSE streams at once; 20 bytes each. */
export const STREAM_SLOTS = 65536

export function createSharedLimits (rateSlots = RATE_SLOTS, streamSlots = STREAM_SLOTS): SharedLimitsInit {
  return { rate: SharedTable.create(rateSlots, 2 + WINDOW), streams: SharedTable.create(streamSlots, 1) }
}

/** What the front end needs of a rate limiter (src/http/rate-limit.ts RateLimiter is one). */
export interface Limiter {
  hit (bucket: string, limit: number, nowMs?: number): RateDecision
  /** Requests left after counting this one, or minus Retry-After (seconds) when refused. */
  take (bucket: string, limit: number, nowMs?: number): number
  close (): void
}

const WINDOW = 60
const SEC = 0
const TOTAL = 1
const COUNTS = 2


/**
 * The sliding 60-second window of src/http/rate-limit.ts (60 one-second buckets), one slot
 * per key in a SharedTable: a check-and-count is one critical section, so N threads together
 * admit exactly `limit` requests a window. Table full (more than RATE_SLOTS keys active in the
 * last minute near one home slot): the request is refused, Retry-After 1 s, never admitted
 * uncounted; `overflows` counts those refusals.
 */
export class SharedRateLimiter implements Limiter {
  private readonly table: SharedTable
  overflows = 0
  /** The second of the call in progress (what `idle` compares with). */
  private nowSec = 0
  /** A window with nothing counted in the last minute may be handed to another key. */
  private readonly idle = (c: Int32Array, b: number): boolean => this.nowSec - c[b + SEC] >= WINDOW

  constructor (init: SharedTableInit) { this.table = new SharedTable(init) }

  hit (bucket: string, limit: number, nowMs = Date.now()): RateDecision {
    const remaining = this.take(bucket, limit, nowMs)
    if (remaining < 0) return { allowed: false, limit, remaining: 0, retryAfter: -remaining }
    return { allowed: true, limit, remaining, retryAfter: 0 }
  }

  take (bucket: string, limit: number, nowMs = Date.now()): number {
    const nowSec = this.nowSec = Math.floor(nowMs / 1000)
    const { kind, id } = bucketKey(bucket)
    const b = this.table.acquire(kind, id, this.idle)
    if (b < 0) { this.overflows++; return -1 }
    const c = this.table.cells
    try {
      const last = c[b + SEC]
      if (nowSec - last >= WINDOW) {
        c.fill(0, b + COUNTS, b + COUNTS + WINDOW)
        c[b + TOTAL] = 0
      } else {
        for (let s = last + 1; s <= nowSec; s++) {
          const i = b + COUNTS + (s % WINDOW)
          c[b + TOTAL] -= c[i]
          c[i] = 0
        }
      }
      if (nowSec > last) c[b + SEC] = nowSec
      if (c[b + TOTAL] >= limit) {
        for (let s = nowSec - WINDOW + 1; s <= nowSec; s++) {
          if (c[b + COUNTS + (((s % WINDOW) + WINDOW) % WINDOW)] > 0) return -Math.max(1, s + WINDOW - nowSec)
        }
        return -1
      }
      c[b + COUNTS + (nowSec % WINDOW)]++
      return limit - ++c[b + TOTAL]
    } finally { this.table.release(b) }
  }

  /** Keys with a live window (tests). */
  size (nowMs = Date.now()): number {
    this.nowSec = Math.floor(nowMs / 1000)
    return this.table.count(this.idle)
  }

  close (): void {}
}

/** Open SSE streams per account (the tier's max_streams), shared by the threads (src/http/sse.ts). */
export interface StreamCounts {
  reserve (accountId: number, max: number): boolean
  /** Frees `n` of the account's slots. */
  release (accountId: number, n: number): void
  open (accountId: number): number
}

const streamsIdle = (c: Int32Array, b: number): boolean => c[b] === 0

export class SharedStreamCounts implements StreamCounts {
  private readonly table: SharedTable
  constructor (init: SharedTableInit) { this.table = new SharedTable(init) }

  /** False at `max`, and when the table is full (refused safely: TOO_MANY_STREAMS). */
  reserve (accountId: number, max: number): boolean {
    return this.table.with(1, accountId, streamsIdle, (c, b) => {
      if (c[b] >= max) return false
      c[b]++
      return true
    }, false)
  }

  release (accountId: number, n: number): void {
    this.table.with(1, accountId, streamsIdle, (c, b) => { c[b] = Math.max(0, c[b] - n) }, undefined)
  }

  open (accountId: number): number {
    return this.table.with(1, accountId, streamsIdle, (c, b) => c[b], 0)
  }
}

/** The single-thread variant (FRONTENDS=1): a map, as before. */
export class LocalStreamCounts implements StreamCounts {
  private readonly perAccount = new Map<number, number>()
  reserve (accountId: number, max: number): boolean {
    const n = this.perAccount.get(accountId) ?? 0
    if (n >= max) return false
    this.perAccount.set(accountId, n + 1)
    return true
  }

  release (accountId: number, n: number): void {
    const left = (this.perAccount.get(accountId) ?? n) - n
    if (left <= 0) this.perAccount.delete(accountId)
    else this.perAccount.set(accountId, left)
  }

  open (accountId: number): number { return this.perAccount.get(accountId) ?? 0 }
}
