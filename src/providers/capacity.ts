/**
 * Upstream capacity counted where every sender sees it (docs/providers.md "Capacity and
 * budgets"): a route's `max_concurrent`, and a provider's `max_concurrent` from the routing
 * file's `providers` section, are the provider's limits for our account, so they hold across
 * every shard of a node and, with REDIS_URL, across every node. There is no per-shard or
 * per-node share any more.
 *
 * - With REDIS_URL: one sorted set per capacity (member = our job id, score = when the entry
 *   expires, Redis clock), checked and taken for all of a job's capacities in one Lua script,
 *   all or nothing. The node running a job renews its entries every LEASE_MS / 3, so a dead
 *   node's jobs fall out after LEASE_MS and come back when another node resumes them (the same
 *   scheme as the per-key in-flight sets, src/shard/inflight.ts).
 * - Without: a SharedArrayBuffer the main thread hands to every shard (one counter per
 *   capacity, taken by compare-and-swap under the cap, plus each shard's own counts so a
 *   restarted shard gives back what its dead predecessor held).
 * - Neither (tests of one thread, a thread without the buffer): counters in this thread.
 */
import type { Redis } from 'ioredis'
import { RENEW_LEASES } from '../util/redis-leases.js'

/** One capacity a job takes a slot in: its Redis key, its index in shared memory, its cap. */
export interface CapSlot { key: string; index: number; cap: number }

/** Where slots are counted. Every method is idempotent per (slot, job). */
export interface CapacityStore {
  /** Takes a slot in every one of `slots` for `jobId` if each has room; all or nothing. */
  take (slots: readonly CapSlot[], jobId: string): Promise<boolean>
  /** Counts a job that already runs upstream (a resume), whatever the caps say: it does occupy them. */
  adopt (slots: readonly CapSlot[], jobId: string): void
  /** Frees the job's slots (it ended, was refused, or moved). */
  release (slots: readonly CapSlot[], jobId: string): void
  /** Jobs holding a slot in `slot` as this store sees them (null: not known here). */
  count (slot: CapSlot): number | null
}

/** Capacities a node can count in shared memory (route and provider caps of one routing file). */
export const MAX_CAP_SLOTS = 1024
/** Budget records in shared memory (one per provider name). */
export const MAX_BUDGETS = 8

/**
 * The memory every thread of one node shares for capacity and request budgets (created by the
 * main thread, handed to each shard through its init message; it survives shard restarts).
 */
export interface SharedProviderState {
  /** Int32: [MAX_CAP_SLOTS global counts][shards x MAX_CAP_SLOTS per-shard counts]. */
  capacity: SharedArrayBuffer
  /** Float64 request-budget records plus their Int32 locks (src/providers/budget.ts). */
  budgets: SharedArrayBuffer
  budgetLocks: SharedArrayBuffer
  shards: number
}

export function createSharedProviderState (shards: number): SharedProviderState {
  return {
    capacity: new SharedArrayBuffer(4 * MAX_CAP_SLOTS * (1 + shards)),
    budgets: new SharedArrayBuffer(8 * 4 * MAX_BUDGETS),
    budgetLocks: new SharedArrayBuffer(4 * MAX_BUDGETS),
    shards,
  }
}

/** Counters of this thread only (no shared memory given, no Redis). */
export class LocalCapacity implements CapacityStore {
  private readonly counts = new Map<number, number>()
  private readonly held = new Map<string, readonly CapSlot[]>()

  take (slots: readonly CapSlot[], jobId: string): Promise<boolean> {
    return Promise.resolve(this.takeNow(slots, jobId))
  }

  takeNow (slots: readonly CapSlot[], jobId: string): boolean {
    if (this.held.has(jobId)) return true
    for (const s of slots) if ((this.counts.get(s.index) ?? 0) >= s.cap) return false
    this.adopt(slots, jobId)
    return true
  }

  adopt (slots: readonly CapSlot[], jobId: string): void {
    if (this.held.has(jobId)) return
    this.held.set(jobId, slots)
    for (const s of slots) this.counts.set(s.index, (this.counts.get(s.index) ?? 0) + 1)
  }

  release (_slots: readonly CapSlot[], jobId: string): void {
    const slots = this.held.get(jobId)
    if (!slots) return
    this.held.delete(jobId)
    for (const s of slots) this.counts.set(s.index, Math.max(0, (this.counts.get(s.index) ?? 0) - 1))
  }

  count (slot: CapSlot): number { return this.counts.get(slot.index) ?? 0 }
}

/**
 * The node's shards together (no Redis): one Int32 counter per capacity shared by every shard,
 * raised by compare-and-swap only while under the cap, so the sum over shards never passes it.
 */
export class SharedCapacity implements CapacityStore {
  private readonly a: Int32Array
  private readonly held = new Map<string, readonly CapSlot[]>()

  /** `shard` is this thread's shard index (-1: a thread that only reads). */
  constructor (state: SharedProviderState, private readonly shard: number) {
    this.a = new Int32Array(state.capacity)
    if (shard >= 0) {
      // A shard that starts again after a crash gives back the slots its predecessor held:
      // the jobs it resumes take them again (adopt).
      for (let i = 0; i < MAX_CAP_SLOTS; i++) {
        const mine = Atomics.exchange(this.a, this.own(i), 0)
        if (mine > 0) Atomics.sub(this.a, i, mine)
      }
    }
  }

  private own (i: number): number { return MAX_CAP_SLOTS * (1 + this.shard) + i }

  take (slots: readonly CapSlot[], jobId: string): Promise<boolean> {
    if (this.held.has(jobId)) return Promise.resolve(true)
    const got: CapSlot[] = []
    for (const s of slots) {
      if (!this.raise(s)) {
        for (const g of got) this.lower(g)
        return Promise.resolve(false)
      }
      got.push(s)
    }
    this.held.set(jobId, slots)
    return Promise.resolve(true)
  }

  adopt (slots: readonly CapSlot[], jobId: string): void {
    if (this.held.has(jobId)) return
    for (const s of slots) { Atomics.add(this.a, s.index, 1); if (this.shard >= 0) Atomics.add(this.a, this.own(s.index), 1) }
    this.held.set(jobId, slots)
  }

  release (_slots: readonly CapSlot[], jobId: string): void {
    const slots = this.held.get(jobId)
    if (!slots) return
    this.held.delete(jobId)
    for (const s of slots) this.lower(s)
  }

  count (slot: CapSlot): number { return Atomics.load(this.a, slot.index) }

  private raise (s: CapSlot): boolean {
    for (;;) {
      const n = Atomics.load(this.a, s.index)
      if (n >= s.cap) return false
      if (Atomics.compareExchange(this.a, s.index, n, n + 1) === n) break
    }
    if (this.shard >= 0) Atomics.add(this.a, this.own(s.index), 1)
    return true
  }

  private lower (s: CapSlot): void {
    if (this.shard >= 0) Atomics.sub(this.a, this.own(s.index), 1)
    // Never below zero (a restart's give-back may have raced a release).
    for (;;) {
      const n = Atomics.load(this.a, s.index)
      if (n <= 0) return
      if (Atomics.compareExchange(this.a, s.index, n, n - 1) === n) return
    }
  }
}

const TAKE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
for i = 1, #KEYS do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now) end
for i = 1, #KEYS do
  if not redis.call('ZSCORE', KEYS[i], ARGV[1]) then
    if redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[i + 2]) then return 0 end
  end
end
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[i], ttl * 2)
end
return 1`

const ADD = RENEW_LEASES

/**
 * Every node together (REDIS_URL). While Redis cannot be reached, a take falls back to `local`
 * (this node's count, logged): capacity is then exact per node only until Redis answers again.
 */
/** The Lua scripts RedisCapacity defines on its connection (ioredis adds them as methods at run time). */
interface CapacityScripts {
  gjCapTake (numKeys: number, ...args: Array<string | number>): Promise<number>
  gjCapAdd (numKeys: number, ...args: Array<string | number>): Promise<unknown>
}

export class RedisCapacity implements CapacityStore {
  private readonly held = new Map<string, readonly CapSlot[]>()
  /** Jobs whose slot was taken in the fallback (released there). */
  private readonly inFallback = new Set<string>()
  private readonly renewer: NodeJS.Timeout
  private warned = 0

  constructor (
    private readonly redis: Redis, private readonly prefix: string, private readonly ttlMs: number,
    private readonly local: CapacityStore, private readonly log: (msg: string, extra?: Record<string, unknown>) => void,
  ) {
    redis.defineCommand('gjCapTake', { lua: TAKE })
    redis.defineCommand('gjCapAdd', { lua: ADD })
    this.renewer = setInterval(() => { this.renew().catch(() => {}) }, Math.max(100, Math.floor(ttlMs / 3)))
    this.renewer.unref()
  }

  keyOf (s: CapSlot): string { return `${this.prefix}:cap:${s.key}` }

  async take (slots: readonly CapSlot[], jobId: string): Promise<boolean> {
    if (this.held.has(jobId)) return true
    if (slots.length === 0) { this.held.set(jobId, slots); return true }
    try {
      const scripts = this.redis as unknown as CapacityScripts
      const ok = await scripts.gjCapTake(slots.length, ...slots.map(s => this.keyOf(s)), jobId, this.ttlMs, ...slots.map(s => s.cap))
      if (ok !== 1) return false
      this.held.set(jobId, slots)
      return true
    } catch (err) {
      if (Date.now() - this.warned > 10_000) { this.warned = Date.now(); this.log('redis capacity check failed; counting this node only', { err: String(err) }) }
      const ok = await this.local.take(slots, jobId)
      if (ok) { this.held.set(jobId, slots); this.inFallback.add(jobId) }
      return ok
    }
  }

  adopt (slots: readonly CapSlot[], jobId: string): void {
    if (this.held.has(jobId)) return
    this.held.set(jobId, slots)
    if (slots.length === 0) return
    ;(this.redis as unknown as CapacityScripts).gjCapAdd(slots.length, ...slots.map(s => this.keyOf(s)), this.ttlMs, ...slots.map(() => jobId)).catch(() => {})
  }

  release (_slots: readonly CapSlot[], jobId: string): void {
    const slots = this.held.get(jobId)
    if (!slots) return
    this.held.delete(jobId)
    if (this.inFallback.delete(jobId)) { this.local.release(slots, jobId); return }
    if (slots.length === 0) return
    const p = this.redis.pipeline()
    for (const s of slots) p.zrem(this.keyOf(s), jobId)
    p.exec().catch(err => this.log('redis capacity release failed', { err: String(err) }))
  }

  count (): number | null { return null }

  /** Extends the entries of every job this thread holds (and re-adds any Redis lost). */
  async renew (): Promise<void> {
    const keys: string[] = []
    const ids: string[] = []
    for (const [id, slots] of this.held) {
      if (this.inFallback.has(id)) continue
      for (const s of slots) { keys.push(this.keyOf(s)); ids.push(id) }
    }
    for (let i = 0; i < keys.length; i += 500) {
      const k = keys.slice(i, i + 500)
      await (this.redis as unknown as CapacityScripts).gjCapAdd(k.length, ...k, this.ttlMs, ...ids.slice(i, i + 500))
    }
  }

  close (): void { clearInterval(this.renewer) }
}
