import type { Redis } from 'ioredis'
import { ByteLru, stringBytes } from '../util/byte-lru.js'

/**
 * Fixed windows of counts per client address (docs/operations.md "Hostile input"): signups
 * per address and hour, refused provider callbacks per address and minute. Bounded in bytes
 * like every map keyed by input (the oldest window goes first).
 */
export class MemoryWindow {
  private readonly map: ByteLru<string, { n: number; start: number }>

  constructor (readonly limit: number, readonly windowMs: number, budgetBytes = 4 * 1024 * 1024) {
    this.map = new ByteLru(budgetBytes, (k) => 120 + stringBytes(k))
  }

  /** Seconds until `key` may go on (0: under the limit). Counts nothing. */
  wait (key: string, now = Date.now()): number {
    const w = this.map.get(key)
    if (w === undefined || now - w.start >= this.windowMs || w.n < this.limit) return 0
    return Math.max(1, Math.ceil((w.start + this.windowMs - now) / 1000))
  }

  /** Counts one for `key`. */
  hit (key: string, now = Date.now()): void {
    const w = this.map.get(key)
    if (w === undefined || now - w.start >= this.windowMs) this.map.set(key, { n: 1, start: now })
    else w.n++
  }

  /** Checks, then counts when allowed: seconds to wait, 0 when this one went through. */
  take (key: string, now = Date.now()): number {
    const s = this.wait(key, now)
    if (s === 0) this.hit(key, now)
    return s
  }

  get size (): number { return this.map.size }
}

/** Signups per client address: 20 an hour (429 RATE_LIMIT_EXCEEDED with Retry-After past it). */
export const SIGNUPS_PER_HOUR = 20

/** One node-wide (or, with REDIS_URL, deployment-wide) signup window. */
export interface SignupThrottle {
  /** Seconds to wait; 0 when this signup may go on (and was counted). */
  take (ip: string): Promise<number>
}

export class MemorySignupThrottle implements SignupThrottle {
  private readonly w = new MemoryWindow(SIGNUPS_PER_HOUR, 3600_000)
  async take (ip: string): Promise<number> { return this.w.take(ip) }
}

const TAKE = `
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if n > tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[1])
  local ttl = redis.call('TTL', KEYS[1])
  if ttl < 1 then ttl = 1 end
  return ttl
end
return 0
`

/** The same window in Redis, shared by every node (one script a signup). */
export class RedisSignupThrottle implements SignupThrottle {
  constructor (private readonly redis: Redis, private readonly prefix: string) {
    redis.defineCommand('gjSignupTake', { numberOfKeys: 1, lua: TAKE })
  }

  async take (ip: string): Promise<number> {
    const r = await (this.redis as unknown as { gjSignupTake: (k: string, limit: number, ttl: number) => Promise<number> })
      .gjSignupTake(`${this.prefix}:su:${ip}`, SIGNUPS_PER_HOUR, 3600)
    return Number(r)
  }
}
