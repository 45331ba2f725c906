import type { Redis } from 'ioredis'
import { ByteLru, stringBytes } from '../util/byte-lru.js'

/**
 * Login throttling (docs/decisions.md "Login throttling"). Failures are
 * counted per account, keyed by the lower-cased email as typed (so an unknown email is
 * throttled exactly like a known one and the answer says nothing about existence), and per
 * client address:
 * - account: from the 10th failure within 15 min, 429 for 1 min after the last failure,
 *   doubling with each further failure up to 15 min; a successful login clears the count;
 * - address: 50 failures within a 15 min window, then 429 until the window ends.
 * A throttled attempt verifies no password and counts as nothing. With REDIS_URL the counts
 * live in Redis and hold across nodes; otherwise in this process (bounded map).
 */
export const LOGIN_ACCOUNT_FAILURES = 10
export const LOGIN_ADDRESS_FAILURES = 50
export const LOGIN_WINDOW_S = 15 * 60
const BASE_LOCK_S = 60

/** Seconds an account with `n` failures, the last at `lastMs`, stays locked at `nowMs` (0 = open). */
export function accountLockS (n: number, lastMs: number, nowMs: number): number {
  if (n < LOGIN_ACCOUNT_FAILURES) return 0
  const lockS = Math.min(LOGIN_WINDOW_S, BASE_LOCK_S * 2 ** (n - LOGIN_ACCOUNT_FAILURES))
  return Math.max(0, Math.ceil((lastMs + lockS * 1000 - nowMs) / 1000))
}

export interface LoginThrottle {
  /** Seconds to wait before trying again (0: go ahead). */
  check (email: string, ip: string): Promise<number>
  failed (email: string, ip: string): Promise<void>
  succeeded (email: string): Promise<void>
}

/**
 * Estimated heap of one in-process throttle entry: 220 bytes measured once (Node 20, 100,000
 * entries with 20-character keys), so 200 fixed plus the key string at its V8 width, plus 80 for
 * the deleted slots a Map keeps while it evicts (as the credential caches, src/http/auth.ts).
 */
const throttleEntryBytes = (k: string): number => 280 + stringBytes(k)

export class MemoryLoginThrottle implements LoginThrottle {
  private readonly accounts: ByteLru<string, { n: number; last: number }>
  private readonly addresses: ByteLru<string, { n: number; start: number }>

  /** `budgetBytes`: both maps together (half each), oldest failure first out (AUTH_CACHE_MB / 4). */
  constructor (budgetBytes = 16 * 1024 * 1024) {
    this.accounts = new ByteLru(Math.floor(budgetBytes / 2), throttleEntryBytes)
    this.addresses = new ByteLru(Math.floor(budgetBytes / 2), throttleEntryBytes)
  }

  async check (email: string, ip: string, now = Date.now()): Promise<number> {
    const a = this.accounts.get(email)
    const accountS = a && now - a.last < LOGIN_WINDOW_S * 1000 ? accountLockS(a.n, a.last, now) : 0
    const b = this.addresses.get(ip)
    const addressS = b && b.n >= LOGIN_ADDRESS_FAILURES && now - b.start < LOGIN_WINDOW_S * 1000 ? Math.ceil((b.start + LOGIN_WINDOW_S * 1000 - now) / 1000) : 0
    return Math.max(accountS, addressS)
  }

  async failed (email: string, ip: string, now = Date.now()): Promise<void> {
    const a = this.accounts.get(email)
    const fresh = !a || now - a.last >= LOGIN_WINDOW_S * 1000
    this.put(this.accounts, email, { n: fresh ? 1 : a.n + 1, last: now })
    const b = this.addresses.get(ip)
    this.put(this.addresses, ip, !b || now - b.start >= LOGIN_WINDOW_S * 1000 ? { n: 1, start: now } : { n: b.n + 1, start: b.start })
  }

  async succeeded (email: string): Promise<void> { this.accounts.delete(email) }

  /** Re-inserts (most recent last); the oldest go past the byte budget. */
  private put<V> (m: ByteLru<string, V>, k: string, v: V): void { m.set(k, v) }

  get size (): number { return this.accounts.size + this.addresses.size }
  /** Estimated heap held (never above the budget). */
  get bytes (): number { return this.accounts.bytes + this.addresses.bytes }
}

const FAIL = `
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('HSET', KEYS[1], 'last', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
local m = redis.call('INCR', KEYS[2])
if m == 1 then redis.call('EXPIRE', KEYS[2], ARGV[2]) end
return n
`

/** The same counts in Redis (one script per failure), shared by every node. */
export class RedisLoginThrottle implements LoginThrottle {
  constructor (private readonly redis: Redis, private readonly prefix: string) {
    redis.defineCommand('gjLoginFail', { numberOfKeys: 2, lua: FAIL })
  }

  private keys (email: string, ip: string): [string, string] {
    return [`${this.prefix}:lf:a:${email}`, `${this.prefix}:lf:ip:${ip}`]
  }

  async check (email: string, ip: string, now = Date.now()): Promise<number> {
    const [ka, kb] = this.keys(email, ip)
    const r = await this.redis.multi().hmget(ka, 'n', 'last').get(kb).ttl(kb).exec()
    const [n, last] = (r?.[0]?.[1] as Array<string | null>) ?? [null, null]
    const m = Number(r?.[1]?.[1] ?? 0)
    const ttl = Number(r?.[2]?.[1] ?? -2)
    const accountS = n !== null && last !== null ? accountLockS(Number(n), Number(last), now) : 0
    const addressS = m >= LOGIN_ADDRESS_FAILURES && ttl > 0 ? ttl : 0
    return Math.max(accountS, addressS)
  }

  async failed (email: string, ip: string, now = Date.now()): Promise<void> {
    const [ka, kb] = this.keys(email, ip)
    await (this.redis as unknown as { gjLoginFail: (a: string, b: string, now: number, ttl: number) => Promise<number> }).gjLoginFail(
      ka, kb, now, LOGIN_WINDOW_S
    )
  }

  async succeeded (email: string): Promise<void> {
    await this.redis.del(this.keys(email, '')[0])
  }
}
