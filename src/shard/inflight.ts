import { Redis } from 'ioredis'
import { RENEW_LEASES } from '../util/redis-leases.js'

/**
 * Per-key in-flight jobs shared by every node (docs/architecture.md "Several nodes": "in-flight counters live in Redis,
 * one Lua script per check"). One sorted set per key: member = job id, score = when the entry
 * expires (Redis clock). A check drops expired members, counts, and adds the job only under
 * the cap, atomically. The node running a job refreshes its score every lease renewal
 * (LEASE_MS / 3), so a dead node's jobs fall out after `ttlMs` and, once another node claims
 * them, come back under that node's renewals: the counts heal themselves.
 */
const ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {1, n} end
if n >= tonumber(ARGV[2]) then return {0, n} end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 2)
return {1, n}`

const RENEW = RENEW_LEASES

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

  /** Re-adds and extends the slots of the jobs this node runs. */
  async renew (jobs: Array<InFlightOwner & { jobId: string }>): Promise<void> {
    for (let i = 0; i < jobs.length; i += 500) {
      const part = jobs.slice(i, i + 500)
      await (this.redis as unknown as InFlightScripts).gjRenew(part.length, ...part.map(j => this.keyOf(j)), this.ttlMs, ...part.map(j => j.jobId))
    }
  }

  async close (): Promise<void> { await this.redis.quit().catch(() => {}) }
}
