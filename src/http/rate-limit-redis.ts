import type { Redis } from 'ioredis'
import type { RateDecision } from './rate-limit.js'

/**
 * The same sliding window as src/http/rate-limit.ts (60 one-second buckets) kept in Redis, so
 * every node counts against one window (docs/architecture.md "Several nodes"). One Lua script per check:
 * drop buckets older than the window, sum the rest, refuse or count.
 */
const SCRIPT = `
local key = KEYS[1]
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local all = redis.call('HGETALL', key)
local total = 0
local oldest = now
for i = 1, #all, 2 do
  local sec = tonumber(all[i])
  if sec <= now - 60 then
    redis.call('HDEL', key, all[i])
  else
    total = total + tonumber(all[i + 1])
    if sec < oldest then oldest = sec end
  end
end
if total >= limit then
  return {0, 0, oldest + 60 - now}
end
redis.call('HINCRBY', key, tostring(now), 1)
redis.call('EXPIRE', key, 61)
return {1, limit - total - 1, 0}
`

export class RedisRateLimiter {
  constructor (private readonly redis: Redis, private readonly prefix: string) {
    redis.defineCommand('gjRate', { numberOfKeys: 1, lua: SCRIPT })
  }

  async hit (bucket: string, limit: number, nowMs = Date.now()): Promise<RateDecision> {
    const nowSec = Math.floor(nowMs / 1000)
    const [ok, remaining, retry] = await (this.redis as unknown as { gjRate: (k: string, n: number, l: number) => Promise<number[]> }).gjRate(`${this.prefix}:rl:${bucket}`, nowSec, limit)
    return ok === 1
      ? { allowed: true, limit, remaining, retryAfter: 0 }
      : { allowed: false, limit, remaining: 0, retryAfter: Math.max(1, retry) }
  }
}
