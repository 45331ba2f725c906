import { Redis } from 'ioredis'

/**
 * Per-key in-flight jobs shared by every node (docs/architecture.md "Several nodes": "in-flight counters live in Redis,
 * one Lua script per check"). One sorted set per key: member = job id, score = when the entry
 * expires (Redis clock). A check drops expired members, counts, and adds the job only under
 * the cap, atomically. The node running a job refreshes its score every lease renewal
 * (LEASE_MS / 3), so a dead node's jobs fall out after `ttlMs` and, once another node claims
 * them, come back under that node's renewals: the counts heal themselves.
 *
 * A waiting job (docs/architecture.md "Waiting jobs") is not renewed every LEASE_MS / 3: its
 * entry is set once, when it parks, to last until its wake-up plus `ttlMs` (WaitingSlots), so
 * renewals cost Redis work per parked job, not per waiting job per interval. A set itself is
 * kept twice as long as its longest entry: no script shortens it.
 */
const ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {1, n} end
if n >= tonumber(ARGV[2]) then return {0, n} end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) * 2 then redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 2) end
return {1, n}`

/**
 * Sets member ARGV[2i - 1] of each sorted set KEYS[i] to expire ARGV[2i] ms from Redis's clock
 * (the score); the set is kept at least twice that (never shortened: it may hold a waiting
 * job's entry that lasts longer).
 */
const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #KEYS do
  local ms = tonumber(ARGV[2 * i])
  redis.call('ZADD', KEYS[i], now + ms, ARGV[2 * i - 1])
  if redis.call('PTTL', KEYS[i]) < ms * 2 then redis.call('PEXPIRE', KEYS[i], ms * 2) end
end
return #KEYS`

/** The Lua scripts defined on the connection below (ioredis adds them as methods at run time). */
interface InFlightScripts {
  gjAcquire (key: string, jobId: string, max: number, ttlMs: number): Promise<[number, number]>
  gjRenew (numKeys: number, ...args: Array<string | number>): Promise<unknown>
}

export interface InFlightOwner { accountId: number; keyId: number | null }

export class RedisInFlight {
  private readonly redis: Redis

  constructor (url: string, private readonly prefix: string, private readonly ttlMs: number) {
    this.redis = new Redis(url, { maxRetriesPerRequest: 1, commandTimeout: 2000, enableOfflineQueue: true })
    this.redis.on('error', () => {}) // reported by the failing calls
    this.redis.defineCommand('gjAcquire', { numberOfKeys: 1, lua: ACQUIRE })
    this.redis.defineCommand('gjRenew', { lua: RENEW })
  }

  /** The set of one API key (or of an account's dashboard session when keyId is null). */
  private keyOf (o: InFlightOwner): string {
    return `${this.prefix}:inflight:${o.keyId === null ? `s${o.accountId}` : `k${o.keyId}`}`
  }

  /** Takes a slot for `jobId` if fewer than `max` are held; `n` is the count before. */
  async acquire (o: InFlightOwner, jobId: string, max: number): Promise<{ ok: boolean; n: number }> {
    const [ok, n] = await (this.redis as unknown as InFlightScripts).gjAcquire(this.keyOf(o), jobId, max, this.ttlMs)
    return { ok: ok === 1, n }
  }

  /** Frees a job's slot (terminal transition, refusal after the check, failed commit). */
  release (o: InFlightOwner, jobId: string): Promise<void> {
    return this.redis.zrem(this.keyOf(o), jobId).then(() => {})
  }

  /** Re-adds and extends the slots of the jobs this node runs: each for `ms` (default ttlMs). */
  async renew (jobs: Array<InFlightOwner & { jobId: string; ms?: number }>): Promise<void> {
    for (let i = 0; i < jobs.length; i += 500) {
      const part = jobs.slice(i, i + 500)
      const args: Array<string | number> = []
      for (const j of part) args.push(j.jobId, Math.max(1, Math.ceil(j.ms ?? this.ttlMs)))
      await (this.redis as unknown as InFlightScripts).gjRenew(part.length, ...part.map(j => this.keyOf(j)), ...args)
    }
  }

  /** Score (expiry, Redis clock ms) and the set's own time to live of one job's slot; tests. */
  async entry (o: InFlightOwner, jobId: string): Promise<{ expiresInMs: number | null; setTtlMs: number }> {
    const key = this.keyOf(o)
    const [score, [s, us], pttl] = await Promise.all([this.redis.zscore(key, jobId), this.redis.time(), this.redis.pttl(key)])
    const now = Number(s) * 1000 + Math.floor(Number(us) / 1000)
    return { expiresInMs: score === null ? null : Number(score) - now, setTtlMs: pttl }
  }

  async close (): Promise<void> { await this.redis.quit().catch(() => {}) }
}

/** What WaitingSlots needs of a waiting job (src/shard/waiting.ts WaitingJob). */
export interface WaitingSlot { readonly id: string; readonly account: number; readonly key: number; readonly due: number }

/**
 * The per-key slots of a shard's waiting jobs (several nodes): each entry is set to last until
 * its job's wake-up plus the lease (`leaseMs`), once when the job parks and again only if its
 * wake-up moved; a woken job is renewed as a live one. A lease renewal then costs one pass over
 * the records in memory and Redis work only for the jobs parked since the last one, instead of
 * one Redis write per waiting job every LEASE_MS / 3.
 */
export class WaitingSlots {
  /** Record -> the due time its entry was set for (records are replaced when a job parks again). */
  private readonly covered = new WeakMap<WaitingSlot, number>()

  constructor (private readonly inflight: RedisInFlight, private readonly leaseMs: number, private readonly dueMsOf: (due: number) => number) {}

  /** Renews the entries that do not last until their job's wake-up yet; answers how many. */
  async renew (records: Iterable<WaitingSlot>, now = Date.now()): Promise<number> {
    const todo: Array<[WaitingSlot, number]> = []
    const jobs: Array<InFlightOwner & { jobId: string; ms: number }> = []
    for (const r of records) {
      if (this.covered.get(r) === r.due) continue
      todo.push([r, r.due])
      jobs.push({ accountId: r.account, keyId: r.key < 0 ? null : r.key, jobId: r.id, ms: Math.max(0, this.dueMsOf(r.due) - now) + this.leaseMs })
    }
    if (jobs.length === 0) return 0
    await this.inflight.renew(jobs)
    for (const [r, due] of todo) this.covered.set(r, due)
    return jobs.length
  }
}
