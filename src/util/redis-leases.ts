/**
 * Lua: sets member ARGV[i + 1] of each sorted set KEYS[i] to expire `ARGV[1]` ms from Redis's
 * clock (the score), and keeps each set itself for twice that. Renews the leases of in-flight
 * counts (src/shard/inflight.ts) and of provider capacity slots (src/providers/capacity.ts).
 */
export const RENEW_LEASES = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], now + ttl, ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], ttl * 2)
end
return #KEYS`
