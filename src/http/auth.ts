import { createHash, timingSafeEqual } from 'node:crypto'
import { ApiError, emailUnverified } from '../errors.js'
import type { Sql } from '../db/connect.js'
import { findAccountById } from '../db/accounts.js'
import { findKeyByHash } from '../db/keys.js'
import { hashKey, isWellFormedKey, KEY_LENGTH, looksLikeKey, queryCredential } from './api-key.js'
import { verifySession } from './jwt.js'
import { ByteLru, stringBytes } from '../util/byte-lru.js'
import type { Caller, Route, Scope, Tier } from './route.js'

/** A key as the front end caches it: enough to authenticate without PostgreSQL. */
export interface KeyRecord {
  id: number
  accountId: number
  scopes: Scope[]
  expiresAt: number | null
  revoked: boolean
  /** The Caller of this key, built once per tier (fast path). */
  caller?: Caller
  /** The second of the last use the fast path recorded in `lastUsed`. */
  usedSec?: number
}

/** Account flags the front end needs per request (the balance lives in the AccountActor). */
export interface AccountFlags {
  id: number
  email: string
  banned: boolean
  hasPurchased: boolean
  enterprise: boolean
  emailVerified: boolean
  creditsLocked: boolean
  passwordChangedAtMs: number | null
}

export function tierOf (a: Pick<AccountFlags, 'enterprise' | 'hasPurchased'>): Exclude<Tier, 'session'> {
  return a.enterprise ? 'enterprise' : a.hasPurchased ? 'pro' : 'free'
}

export interface Cached<T> { v: T; at: number; reloading?: boolean }

/** Default memory budget of the credential caches (AUTH_CACHE_MB). */
export const AUTH_CACHE_MB = 64

/**
 * Estimated heap of one cached entry (bounded in bytes). Fixed parts measured once on
 * Node 20 (heapUsed after gc over 100,000 entries: a key with its record and Caller 389 bytes,
 * a cached miss 253, an account with a 20-character email 284, a raw key -> hash memo 349),
 * rounded up, plus CHURN: a Map that keeps evicting holds deleted slots until it rehashes
 * (test/fixtures/auth-cache-heap.ts measured ~80 bytes an entry more under eviction than
 * filled once); strings counted at their V8 width (stringBytes).
 */
const CHURN = 80
export const keyEntryBytes = (hash: string, c: Cached<KeyRecord | null>): number =>
  CHURN + 320 + stringBytes(hash) + (c.v === null ? 0 : 48 + 8 * c.v.scopes.length)
export const accountEntryBytes = (_id: number, c: Cached<AccountFlags | null>): number => CHURN + 260 + (c.v === null ? 0 : stringBytes(c.v.email))
export const hashEntryBytes = (key: string, hash: string): number => CHURN + 200 + stringBytes(key) + stringBytes(hash)

/**
 * Resolves credentials (docs/api.md "Accounts, sessions and keys") with a read-through cache: a hot key costs one
 * SHA-256 and two map lookups, no database round trip. Changes made on this node (rotate,
 * revoke, operator PATCH, purchase, password change) invalidate at once; other nodes' changes
 * are seen within `ttlMs` (docs/architecture.md "Several nodes"; with REDIS_URL invalidations are also published).
 * Each cache is bounded by a share of a byte budget (keys 1/2, accounts 1/4, key hashes 1/4),
 * least recently (re)loaded out first: an entry in use is reloaded, and so re-inserted as most
 * recent, at least every ttlMs / 2, so the order is LRU to within that interval.
 */
/**
 * 403 insufficient_scope for a credential that is valid: the caller is known, so the refusal
 * counts in its rate window and carries its X-RateLimit-* headers like any answer to it
 * (docs/api.md "Accounts, sessions and keys").
 */
export class ScopeRefused extends ApiError {
  constructor (readonly caller: Caller, message: string, requiredScope: Scope | 'session') {
    super('insufficient_scope', message, { required_scope: requiredScope })
  }
}

/**
 * Throws INVALID_API_KEY when the query string carries a credential (`?api_key=` and the like),
 * on every route, public ones included: a key in a URL ends up in logs (docs/api.md "Accounts,
 * sessions and keys"). `instead` says what to send.
 */
export function refuseQueryCredential (query: URLSearchParams, instead = 'send X-API-Key or Authorization: Bearer'): void {
  const inQuery = queryCredential(query)
  if (inQuery !== null) throw new ApiError('INVALID_API_KEY', `API keys in the query string (?${inQuery}=) are never accepted: a URL ends up in logs; ${instead}`)
}

export class Authenticator {
  private readonly keys: ByteLru<string, Cached<KeyRecord | null>>
  private readonly accounts: ByteLru<number, Cached<AccountFlags | null>>
  private readonly adminDigest: Buffer
  /**
   * Raw key -> its SHA-256 hex, for keys whose record is cached (the fast path skips the
   * ~1.5 µs hash). Held only in this process's memory, like the request that carried the key.
   */
  private readonly hashes: ByteLru<string, string>
  /** key id -> last use time, flushed with the metering batch. */
  readonly lastUsed = new Map<number, number>()
  onInvalidate: ((kind: 'key' | 'account', id: string) => void) | null = null
  /**
   * Loads in flight by key hash and account id: requests that find the same entry missing or
   * expired (a burst after an idle spell) share one SELECT. An invalidation drops the shared
   * load, so a request after it never takes a value read before it.
   */
  private readonly loadingKeys = new Map<string, Promise<KeyRecord | null>>()
  private readonly loadingAccounts = new Map<number, Promise<AccountFlags | null>>()
  /** Loaders made once (the fast path allocates no closure per request). */
  private readonly loadKeyFn = (hash: string) => this.loadKey(hash)
  private readonly loadAccountFn = (id: number) => this.loadAccount(id)

  /** `budgetBytes`: estimated heap all three caches may hold together (AUTH_CACHE_MB). */
  constructor (
    private readonly sql: Sql, private readonly jwtSecret: string, adminToken: string, private readonly ttlMs = 5000,
    budgetBytes = AUTH_CACHE_MB * 1024 * 1024
  ) {
    this.adminDigest = createHash('sha256').update(adminToken).digest()
    this.keys = new ByteLru(Math.floor(budgetBytes / 2), keyEntryBytes)
    this.accounts = new ByteLru(Math.floor(budgetBytes / 4), accountEntryBytes)
    this.hashes = new ByteLru(Math.floor(budgetBytes / 4), hashEntryBytes)
  }

  /** Entries held by the key and account caches (tests, metrics). */
  get cacheSizes (): { keys: number; accounts: number; hashes: number; bytes: number } {
    return { keys: this.keys.size, accounts: this.accounts.size, hashes: this.hashes.size, bytes: this.keys.bytes + this.accounts.bytes + this.hashes.bytes }
  }

  invalidateKey (hash: string, broadcast = true): void {
    this.keys.delete(hash)
    this.loadingKeys.delete(hash)
    this.hashes.clear()
    if (broadcast) this.onInvalidate?.('key', hash)
  }

  invalidateAccount (id: number, broadcast = true): void {
    this.accounts.delete(id)
    this.loadingAccounts.delete(id)
    if (broadcast) this.onInvalidate?.('account', String(id))
  }

  /**
   * A hot entry is reloaded in the background once it is half its life old, so requests never
   * wait for PostgreSQL on it, and no entry older than `ttlMs` is ever used. The reload is
   * dropped if the entry was invalidated or replaced meanwhile (it may predate that change).
   */
  private fresh<K, V> (map: ByteLru<K, Cached<V>>, k: K, c: Cached<V> | undefined, now: number, load: (k: K) => Promise<V>): boolean {
    if (!c || now - c.at >= this.ttlMs) return false
    if (now - c.at >= this.ttlMs / 2 && !c.reloading) this.reload(map, k, c, now, load)
    return true
  }

  /**
   * The background reload of `fresh`, in its own function: variables captured by a closure
   * live in a context object made at every entry of the function that declares them, so with
   * the closures in `fresh` each request allocated one (~180 bytes a request).
   */
  private reload<K, V> (map: ByteLru<K, Cached<V>>, k: K, c: Cached<V>, now: number, load: (k: K) => Promise<V>): void {
    c.reloading = true
    load(k).then((v) => { if (map.get(k) === c && v !== null) map.set(k, { v, at: now }) }, () => {}).finally(() => { c.reloading = false })
  }

  /** 403 NOT_ELIGIBLE `email_unverified` unless the caller's account has a verified email (the admin has no account). */
  async requireVerified (caller: Caller, what?: string): Promise<void> {
    if (caller.kind === 'admin') return
    const a = await this.account(caller.accountId)
    if (a !== null && !a.emailVerified) throw emailUnverified(what)
  }

  async account (id: number): Promise<AccountFlags | null> {
    const now = Date.now()
    const c = this.accounts.get(id)
    if (this.fresh(this.accounts, id, c, now, this.loadAccountFn)) return c!.v
    // A miss is not cached: the id may be created a moment later (signup, operator), and only a
    // correctly signed session can ask for an id without an account behind it.
    return this.coalesce(this.loadingAccounts, this.accounts, id, now, this.loadAccountFn, false)
  }

  /**
   * Loads `k` once for every request that misses it at the same time (an expired entry, a cold
   * key under load): callers share the pending load, whose result is cached (`keepMisses`: a
   * null too) unless the entry was invalidated while it ran (it may predate that change).
   */
  private coalesce<K, V> (
    loading: Map<K, Promise<V | null>>, map: ByteLru<K, Cached<V | null>>, k: K, now: number, load: (k: K) => Promise<V | null>, keepMisses: boolean
  ): Promise<V | null> {
    const pending = loading.get(k)
    if (pending !== undefined) return pending
    const p = load(k)
    loading.set(k, p)
    p.then((v) => {
      if (loading.get(k) !== p) return // invalidated meanwhile: not cached
      if (v !== null || keepMisses) map.set(k, { v, at: now })
      else map.delete(k)
    }, () => {}).finally(() => { if (loading.get(k) === p) loading.delete(k) })
    return p
  }

  private async loadAccount (id: number): Promise<AccountFlags | null> {
    const row = await findAccountById(this.sql, id)
    const v: AccountFlags | null = row
      ? {
          id: row.id,
          email: row.email,
          banned: row.banned,
          hasPurchased: row.has_purchased,
          enterprise: row.enterprise,
          emailVerified: row.email_verified,
          creditsLocked: row.credits_locked,
          passwordChangedAtMs: row.password_changed_at ? row.password_changed_at.getTime() : null,
        }
      : null
    return v
  }

  private async key (hash: string): Promise<KeyRecord | null> {
    const now = Date.now()
    const c = this.keys.get(hash)
    if (this.fresh(this.keys, hash, c, now, this.loadKeyFn)) return c!.v
    // Unknown keys are cached too (bounded in bytes).
    return this.coalesce(this.loadingKeys, this.keys, hash, now, this.loadKeyFn, true)
  }

  private async loadKey (hash: string): Promise<KeyRecord | null> {
    const row = await findKeyByHash(this.sql, hash)
    return row
      ? {
        id: row.id, accountId: row.account_id, scopes: row.scopes as Scope[], expiresAt: row.expires_at ? row.expires_at.getTime() : null,
        revoked: row.revoked_at !== null, caller: undefined, usedSec: -1 // every field set here: one hidden class for all records
      }
      : null
  }

  /**
   * The synchronous fast path: the Caller of a `key` route's request whose API key
   * (X-API-Key, or Authorization: Bearer gjs_sk_...) and account are cached, fresh, valid and
   * carry the route's scope; undefined for anything else, which `authenticate` then answers
   * (errors included). No promise, no allocation on a hit.
   */
  fastCaller (route: Route, apiKeyHeader: string, authorization: string, now = Date.now()): Caller | undefined {
    if (route.auth !== 'key') return undefined
    let key: string
    if (apiKeyHeader !== '') key = apiKeyHeader
    else if (authorization.length === 7 + KEY_LENGTH && authorization.startsWith('Bearer ')) key = authorization.slice(7)
    else return undefined
    let hash = this.hashes.get(key)
    const memo = hash !== undefined
    if (hash === undefined) {
      if (!isWellFormedKey(key)) return undefined
      hash = hashKey(key)
    }
    const c = this.keys.get(hash)
    if (!this.fresh(this.keys, hash, c, now, this.loadKeyFn)) return undefined
    const rec = c!.v
    if (rec === null || rec.revoked || (rec.expiresAt !== null && rec.expiresAt <= now)) return undefined
    const a = this.accounts.get(rec.accountId)
    if (!this.fresh(this.accounts, rec.accountId, a, now, this.loadAccountFn)) return undefined
    const acct = a!.v
    if (acct === null || acct.banned) return undefined
    if (route.scope !== undefined && !rec.scopes.includes(route.scope)) return undefined
    if (!memo) this.hashes.set(key, hash)
    // last_used_at to the second: the map is written once per key and second, not per request.
    const sec = Math.floor(now / 1000)
    if (rec.usedSec !== sec) { rec.usedSec = sec; this.lastUsed.set(rec.id, now) }
    const tier = tierOf(acct)
    let caller = rec.caller
    if (caller === undefined || caller.tier !== tier) caller = rec.caller = { kind: 'key', accountId: rec.accountId, keyId: rec.id, tier, scopes: rec.scopes, bucket: `k${rec.id}` }
    return caller
  }

  /** Operator token check, constant time (docs/api.md "Endpoints", operator routes). */
  checkAdmin (authorization: string | undefined): Caller {
    const token = bearer(authorization)
    if (token === undefined) throw new ApiError('AUTH_REQUIRED', 'Operator routes need Authorization: Bearer <ADMIN_TOKEN>')
    const given = createHash('sha256').update(token).digest()
    if (!timingSafeEqual(given, this.adminDigest)) throw new ApiError('TOKEN_INVALID', 'Operator token is wrong')
    return { kind: 'admin', accountId: 0, keyId: null, tier: 'enterprise', scopes: ['generate', 'read'], bucket: 'admin' }
  }

  /**
   * Authenticates a request for `route` and checks its scope (a valid credential without it:
   * ScopeRefused, which names the caller). Credentials come from
   * X-API-Key or Authorization: Bearer; `?api_key=` is always refused (docs/api.md "Accounts, sessions and keys").
   */
  async authenticate (route: Route, headers: Record<string, string>, query: URLSearchParams): Promise<Caller> {
    refuseQueryCredential(query)
    if (route.auth === 'admin') return this.checkAdmin(headers.authorization)

    const apiKeyHeader = headers['x-api-key']
    const auth = headers.authorization
    let keyCandidate: string | undefined
    let jwt: string | undefined
    if (apiKeyHeader !== undefined && apiKeyHeader !== '') keyCandidate = apiKeyHeader.trim()
    else if (auth !== undefined && auth !== '') {
      const token = bearer(auth)
      if (token === undefined) throw new ApiError('AUTH_REQUIRED', 'Authorization must use the Bearer scheme')
      if (looksLikeKey(token)) keyCandidate = token
      else jwt = token
    } else {
      throw new ApiError('AUTH_REQUIRED', route.auth === 'session'
        ? 'This route needs a dashboard session: Authorization: Bearer <SESSION_JWT>'
        : 'Send an API key in X-API-Key or Authorization: Bearer')
    }

    let caller: Caller
    if (keyCandidate !== undefined) {
      caller = await this.fromKey(keyCandidate)
      if (route.auth === 'session') throw new ScopeRefused(caller, 'API key management needs a dashboard session (JWT), not an API key', 'session')
    } else {
      caller = await this.fromSession(jwt!, route.auth !== 'session')
    }
    if (route.scope !== undefined && !caller.scopes.includes(route.scope)) throw new ScopeRefused(caller, `This route needs the ${route.scope} scope`, route.scope)
    return caller
  }

  private async fromKey (key: string): Promise<Caller> {
    if (!isWellFormedKey(key)) throw new ApiError('INVALID_API_KEY', 'API key is malformed')
    const rec = await this.key(hashKey(key))
    if (rec === null || rec.revoked) throw new ApiError('INVALID_API_KEY')
    if (rec.expiresAt !== null && rec.expiresAt <= Date.now()) throw new ApiError('KEY_EXPIRED')
    const acct = await this.account(rec.accountId)
    if (acct === null) throw new ApiError('INVALID_API_KEY', 'API key belongs to a deleted account')
    if (acct.banned) throw new ApiError('ACCOUNT_BANNED')
    this.lastUsed.set(rec.id, Date.now())
    return { kind: 'key', accountId: rec.accountId, keyId: rec.id, tier: tierOf(acct), scopes: rec.scopes, bucket: `k${rec.id}` }
  }

  private async fromSession (token: string, refuseBanned: boolean): Promise<Caller> {
    const claims = verifySession(this.jwtSecret, token)
    const id = Number(claims.sub)
    const acct = await this.account(id)
    if (acct === null) throw new ApiError('USER_NOT_FOUND')
    if (acct.passwordChangedAtMs !== null && claims.iat_ms < acct.passwordChangedAtMs) throw new ApiError('PASSWORD_CHANGED')
    if (refuseBanned && acct.banned) throw new ApiError('ACCOUNT_BANNED')
    return { kind: 'session', accountId: id, keyId: null, tier: 'session', scopes: ['generate', 'read'], bucket: `u${id}` }
  }
}

function bearer (header: string | undefined): string | undefined {
  if (header === undefined) return undefined
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header)
  return m ? m[1] : undefined
}
