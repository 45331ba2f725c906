/**
 * Per-provider request budgets (docs/providers.md "Capacity and budgets"): an optional
 * `requests_per_second` per provider in the routing file's `providers` section, shared by
 * every submit, status/result poll and cancel the adapters send (src/providers/http.ts), on
 * every shard and, with REDIS_URL, on every node.
 *
 * The budget is a GCRA (the token bucket as one timestamp, "theoretical arrival time"):
 * interval T = 1 s / requests_per_second, burst B (default max(1, ceil(rps / 4))). In any window
 * of t seconds at most rps x t + B requests leave, whichever node sends them.
 * - A submit or cancel (`call`) reserves its turn: it waits until then (at most `max_wait_ms`,
 *   default 5000) and goes. A turn further away than that is not reserved: the call fails at
 *   once as an upstream 429 would (UpstreamUnavailable, HTTP 429, Retry-After = the wait), so a
 *   creation answers `queued` and is submitted later, and nothing was sent.
 * - A poll (GET: status, result) never reserves: it goes only when a turn is free now, else it
 *   sleeps and tries again. Reserved calls push the free turn into the future, so polls are the
 *   first to be deferred; after `max_wait_ms` a poll gives up the same way (the job polls later).
 * - An upstream 429 lowers the budget on every node: the interval doubles (at most once a
 *   second, down to 1/16 of the rate) until its Retry-After has passed (1 s without one), and the
 *   burst is spent.
 */
import type { Redis } from 'ioredis'
import { setTimeout as sleep } from 'node:timers/promises'
import { MAX_BUDGETS, type SharedProviderState } from './capacity.js'
import { UpstreamUnavailable } from './upstream.js'

/** The `providers` section of the routing file, per provider. */
export interface ProviderSettings {
  /** Requests per second to this provider, all nodes together (submits, polls and cancels). */
  requests_per_second?: number
  /** Requests that may leave at once after a quiet spell (default max(1, ceil(rps / 4))). */
  burst?: number
  /** Jobs this provider holds for us at once, every route and node together. */
  max_concurrent?: number
  /** The longest a request waits for its turn before it is treated as a 429 (default 5000 ms). */
  max_wait_ms?: number
  /**
   * Reconciliation of jobs this provider calls back (docs/providers.md "Polling and lost
   * callbacks"): the first poll this long after submission instead of the model's estimate (the
   * gaps then double from a quarter of it, at least 5 s, up to 10 min).
   */
  reconcile_after_s?: number
}

const SETTING_KEYS = new Set(['requests_per_second', 'burst', 'max_concurrent', 'max_wait_ms', 'reconcile_after_s'])
const BUDGETED = ['fal', 'replicate', 'kie']
export const DEFAULT_MAX_WAIT_MS = 5000
/** Most slow-down an upstream 429 can cause: 1/16 of the configured rate. */
const MAX_FACTOR = 16

/** Validates the routing file's `providers` section; throws one line naming the mistake. */
export function parseProviderSettings (v: unknown, where: string): Record<string, ProviderSettings> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error(`${where}: "providers" must be an object of provider name -> {requests_per_second?, burst?, max_concurrent?, max_wait_ms?}`)
  const out: Record<string, ProviderSettings> = {}
  for (const [name, s] of Object.entries(v as Record<string, unknown>)) {
    const at = `${where}: providers.${name}`
    if (!BUDGETED.includes(name)) throw new Error(`${at}: unknown provider (one of ${BUDGETED.join(', ')})`)
    if (s === null || typeof s !== 'object' || Array.isArray(s)) throw new Error(`${at} must be an object {requests_per_second?, burst?, max_concurrent?, max_wait_ms?}`)
    for (const k of Object.keys(s)) if (!SETTING_KEYS.has(k)) throw new Error(`${at}: unknown key ${JSON.stringify(k)} (expected requests_per_second, burst, max_concurrent, max_wait_ms or reconcile_after_s)`)
    const o = s as Record<string, unknown>
    const settings: ProviderSettings = {}
    if (o.requests_per_second !== undefined) {
      const r = o.requests_per_second
      if (typeof r !== 'number' || !Number.isFinite(r) || r <= 0 || r > 100_000) throw new Error(`${at}.requests_per_second must be a number > 0 (at most 100000), got ${JSON.stringify(r)}`)
      settings.requests_per_second = r
    }
    if (o.burst !== undefined) {
      if (settings.requests_per_second === undefined) throw new Error(`${at}.burst needs requests_per_second`)
      if (!isInt(o.burst, 1, 100_000)) throw new Error(`${at}.burst must be an integer >= 1, got ${JSON.stringify(o.burst)}`)
      settings.burst = o.burst as number
    }
    if (o.max_concurrent !== undefined) {
      if (!isInt(o.max_concurrent, 1, 1_000_000)) throw new Error(`${at}.max_concurrent must be an integer >= 1, got ${JSON.stringify(o.max_concurrent)}`)
      settings.max_concurrent = o.max_concurrent as number
    }
    if (o.max_wait_ms !== undefined) {
      if (!isInt(o.max_wait_ms, 0, 60_000)) throw new Error(`${at}.max_wait_ms must be an integer between 0 and 60000, got ${JSON.stringify(o.max_wait_ms)}`)
      settings.max_wait_ms = o.max_wait_ms as number
    }
    if (o.reconcile_after_s !== undefined) {
      const r = o.reconcile_after_s
      if (typeof r !== 'number' || !Number.isFinite(r) || r <= 0 || r > 86_400) throw new Error(`${at}.reconcile_after_s must be a number of seconds > 0 (at most 86400), got ${JSON.stringify(r)}`)
      settings.reconcile_after_s = r
    }
    out[name] = settings
  }
  return out
}

function isInt (v: unknown, min: number, max: number): boolean {
  return typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max
}

/** Submits and cancels reserve their turn; polls take a free turn or wait. */
export type CallKind = 'call' | 'poll'

/** One decision: go (after `waitMs`, a turn reserved) or not now (try again after `waitMs`). */
export interface Turn { ok: boolean; waitMs: number }

/** The GCRA record: theoretical arrival time, slow-down factor, until when, when last doubled (ms). */
export interface GcraState { tat: number; factor: number; until: number; doubled: number }

export interface GcraParams { intervalMs: number; burst: number }

/** One take on a record (mutates `s` when a turn is given). The Lua copy in RedisBudget does the same. */
export function gcraTake (s: GcraState, now: number, p: GcraParams, kind: CallKind, maxWaitMs: number): Turn {
  const factor = now >= s.until ? 1 : s.factor
  const T = p.intervalMs * factor
  const tau = (p.burst - 1) * T
  const tat = Math.max(s.tat, now)
  const wait = Math.max(0, tat - tau - now)
  if (kind === 'poll' ? wait > 0 : wait > maxWaitMs) return { ok: false, waitMs: wait }
  s.tat = tat + T
  return { ok: true, waitMs: wait }
}

/** An upstream 429: half the rate until `retryAfterMs` from now (doubling at most once a second); the burst is spent. */
export function gcraThrottle (s: GcraState, now: number, p: GcraParams, retryAfterMs: number): void {
  let factor = now >= s.until ? 1 : s.factor
  if (now - s.doubled >= 1000) { factor = Math.min(MAX_FACTOR, factor * 2); s.doubled = now }
  s.factor = factor
  s.until = Math.max(s.until, now + retryAfterMs)
  const T = p.intervalMs * factor
  s.tat = Math.max(s.tat, now + (p.burst - 1) * T + T)
}

/** Where a provider's GCRA record lives. */
export interface BudgetStore {
  take (kind: CallKind, p: GcraParams, maxWaitMs: number): Promise<Turn>
  throttle (p: GcraParams, retryAfterMs: number): Promise<void>
}

/** This thread only. */
export class LocalBudgetStore implements BudgetStore {
  readonly s: GcraState = { tat: 0, factor: 1, until: 0, doubled: 0 }
  take (kind: CallKind, p: GcraParams, maxWaitMs: number): Promise<Turn> { return Promise.resolve(gcraTake(this.s, Date.now(), p, kind, maxWaitMs)) }
  throttle (p: GcraParams, retryAfterMs: number): Promise<void> { gcraThrottle(this.s, Date.now(), p, retryAfterMs); return Promise.resolve() }
}

/**
 * Every thread of the node (no Redis): the record in shared memory, changed under a spin lock
 * held for a few arithmetic operations. The lock word names its holder, so a shard restarted
 * after a crash frees a lock its predecessor died holding.
 */
export class SharedBudgetStore implements BudgetStore {
  private readonly f: Float64Array
  private readonly lock: Int32Array

  constructor (state: SharedProviderState, private readonly slot: number, private readonly owner: number) {
    if (slot < 0 || slot >= MAX_BUDGETS) throw new Error(`budget slot ${slot} out of range`)
    this.f = new Float64Array(state.budgets, slot * 4 * 8, 4)
    this.lock = new Int32Array(state.budgetLocks, slot * 4, 1)
    Atomics.compareExchange(this.lock, 0, owner, 0)
  }

  private with<T> (fn: (s: GcraState) => T): T {
    let spins = 0
    while (Atomics.compareExchange(this.lock, 0, 0, this.owner) !== 0) {
      // Held for microseconds; if a holder vanished the lock is taken over after ~100 ms.
      if (++spins % 1000 === 0) Atomics.wait(this.lock, 0, Atomics.load(this.lock, 0), 1)
      if (spins > 100_000) { Atomics.store(this.lock, 0, this.owner); break }
    }
    try {
      const s: GcraState = { tat: this.f[0], factor: this.f[1] || 1, until: this.f[2], doubled: this.f[3] }
      const r = fn(s)
      this.f[0] = s.tat; this.f[1] = s.factor; this.f[2] = s.until; this.f[3] = s.doubled
      return r
    } finally {
      Atomics.store(this.lock, 0, 0)
    }
  }

  take (kind: CallKind, p: GcraParams, maxWaitMs: number): Promise<Turn> {
    return Promise.resolve(this.with(s => gcraTake(s, Date.now(), p, kind, maxWaitMs)))
  }

  throttle (p: GcraParams, retryAfterMs: number): Promise<void> {
    this.with(s => gcraThrottle(s, Date.now(), p, retryAfterMs))
    return Promise.resolve()
  }
}

const TAKE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local kind = ARGV[3]
local maxwait = tonumber(ARGV[4])
local h = redis.call('HMGET', KEYS[1], 'tat', 'factor', 'until')
local tat = tonumber(h[1]) or 0
local factor = tonumber(h[2]) or 1
local untl = tonumber(h[3]) or 0
if now >= untl then factor = 1 end
local T = interval * factor
local tau = (burst - 1) * T
if tat < now then tat = now end
local wait = tat - tau - now
if wait < 0 then wait = 0 end
if (kind == 'poll' and wait > 0) or (kind ~= 'poll' and wait > maxwait) then return {0, tostring(wait)} end
redis.call('HSET', KEYS[1], 'tat', tostring(tat + T))
redis.call('PEXPIRE', KEYS[1], math.ceil(tat + T - now) + 60000)
return {1, tostring(wait)}`

const THROTTLE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local ra = tonumber(ARGV[3])
local h = redis.call('HMGET', KEYS[1], 'tat', 'factor', 'until', 'doubled')
local tat = tonumber(h[1]) or 0
local factor = tonumber(h[2]) or 1
local untl = tonumber(h[3]) or 0
local doubled = tonumber(h[4]) or 0
if now >= untl then factor = 1 end
if now - doubled >= 1000 then
  factor = math.min(${MAX_FACTOR}, factor * 2)
  doubled = now
end
if now + ra > untl then untl = now + ra end
local T = interval * factor
local floor = now + (burst - 1) * T + T
if tat < floor then tat = floor end
redis.call('HSET', KEYS[1], 'tat', tostring(tat), 'factor', tostring(factor), 'until', tostring(untl), 'doubled', tostring(doubled))
redis.call('PEXPIRE', KEYS[1], math.ceil(math.max(tat, untl) - now) + 60000)
return 1`

/** Every node (REDIS_URL); falls back to `local` while Redis cannot be reached. */
/** The Lua scripts RedisBudgetStore defines on its connection (ioredis adds them as methods at run time). */
interface BudgetScripts {
  gjBudgetTake (key: string, intervalMs: number, burst: number, kind: string, maxWaitMs: number): Promise<[number, string]>
  gjBudgetThrottle (key: string, intervalMs: number, burst: number, retryAfterMs: number): Promise<unknown>
}

export class RedisBudgetStore implements BudgetStore {
  private readonly key: string
  private warned = 0

  constructor (private readonly redis: Redis, prefix: string, provider: string, private readonly local: BudgetStore,
    private readonly log: (msg: string, extra?: Record<string, unknown>) => void) {
    this.key = `${prefix}:budget:${provider}`
    redis.defineCommand('gjBudgetTake', { numberOfKeys: 1, lua: TAKE })
    redis.defineCommand('gjBudgetThrottle', { numberOfKeys: 1, lua: THROTTLE })
  }

  async take (kind: CallKind, p: GcraParams, maxWaitMs: number): Promise<Turn> {
    try {
      const [ok, wait] = await (this.redis as unknown as BudgetScripts).gjBudgetTake(this.key, p.intervalMs, p.burst, kind, maxWaitMs)
      return { ok: ok === 1, waitMs: Number(wait) }
    } catch (err) {
      this.fallback(err)
      return this.local.take(kind, p, maxWaitMs)
    }
  }

  async throttle (p: GcraParams, retryAfterMs: number): Promise<void> {
    try {
      await (this.redis as unknown as BudgetScripts).gjBudgetThrottle(this.key, p.intervalMs, p.burst, retryAfterMs)
    } catch (err) {
      this.fallback(err)
      await this.local.throttle(p, retryAfterMs)
    }
  }

  private fallback (err: unknown): void {
    if (Date.now() - this.warned > 10_000) { this.warned = Date.now(); this.log('redis request budget failed; counting this thread only', { err: String(err) }) }
  }
}

/** One provider's budget as the adapters' HTTP client uses it. */
export class Budget {
  readonly params: GcraParams
  readonly maxWaitMs: number

  constructor (readonly provider: string, readonly rps: number, burst: number | undefined, maxWaitMs: number | undefined, private readonly store: BudgetStore) {
    this.params = { intervalMs: 1000 / rps, burst: burst ?? Math.max(1, Math.ceil(rps / 4)) }
    this.maxWaitMs = maxWaitMs ?? DEFAULT_MAX_WAIT_MS
  }

  /**
   * Waits for this request's turn. Throws UpstreamUnavailable (HTTP 429, Retry-After the wait)
   * when the turn is further than max_wait_ms: nothing was sent, the caller treats it as the
   * provider's own 429 (a creation is `queued`, a poll comes back later).
   */
  async acquire (kind: CallKind, signal?: AbortSignal): Promise<void> {
    const giveUp = Date.now() + this.maxWaitMs
    for (;;) {
      signal?.throwIfAborted()
      const left = Math.max(0, giveUp - Date.now())
      const turn = await this.store.take(kind, this.params, left)
      if (turn.ok) {
        if (turn.waitMs > 0) await sleep(turn.waitMs, undefined, { signal })
        return
      }
      if (kind === 'call' || turn.waitMs > left) {
        const ms = Math.ceil(turn.waitMs)
        throw new UpstreamUnavailable(`${this.provider}: request budget of ${this.rps}/s spent; next turn in ${ms} ms (nothing was sent)`, 429, Math.max(1, ms))
      }
      // A poll: try again when a turn should be free, spread a little so waiting polls do not
      // all ask at the same instant.
      await sleep(turn.waitMs + Math.random() * this.params.intervalMs, undefined, { signal })
    }
  }

  /** The provider answered 429: lower the budget everywhere for its Retry-After. */
  throttled (retryAfterMs: number | null): void {
    this.store.throttle(this.params, Math.max(1000, retryAfterMs ?? 1000)).catch(() => {})
  }
}

/** Budgets of this thread by provider name (installed by Providers.load; read by http.ts). */
const budgets = new Map<string, Budget>()

export function installBudgets (list: Budget[]): void {
  budgets.clear()
  for (const b of list) budgets.set(b.provider, b)
}

/** Removes these budgets if they are still the installed ones (a closed Providers). */
export function uninstallBudgets (list: Budget[]): void {
  for (const b of list) if (budgets.get(b.provider) === b) budgets.delete(b.provider)
}

export function budgetOf (provider: string): Budget | undefined {
  return budgets.get(provider)
}

/** Budget slot of a provider in shared memory. */
export function budgetSlot (provider: string): number { return BUDGETED.indexOf(provider) }
