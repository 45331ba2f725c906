import { createHash, timingSafeEqual } from 'node:crypto'
import { ApiError } from '../errors.js'
import type { Sql } from '../db/connect.js'
import { findAccountById } from '../db/accounts.js'
import { findKeyByHash } from '../db/keys.js'
import { hashKey, isWellFormedKey, KEY_LENGTH, looksLikeKey } from './api-key.js'
import { verifySession } from './jwt.js'
import type { Caller, Route, Scope, Tier } from './route.js'

/** A key as the front end caches it: enough to authenticate without PostgreSQL. */
export interface KeyRecord {
  id: number
  accountId: number
  scopes: Scope[]
  expiresAt: number | null
  revoked: boolean
  /** The Caller of this key, built once per tier (fast path, issue 13). */
  caller?: Caller
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

interface Cached<T> { v: T; at: number; reloading?: boolean }

const FAST_HASHES = 100_000

/**
 * Resolves credentials (SPEC.md section 5) with a read-through cache: a hot key costs one
 * SHA-256 and two map lookups, no database round trip. Changes made on this node (rotate,
 * revoke, operator PATCH, purchase, password change) invalidate at once; other nodes' changes
 * are seen within `ttlMs` (DESIGN.md section 4; with REDIS_URL invalidations are also published).
 */
/**
 * Inserts as most recent and drops the oldest entries past `max` (issue 15 point 6: a flood of
 * random keys, each a cached miss, must not grow the process without bound).
 */
function setBounded<K, V> (map: Map<K, V>, k: K, v: V, max: number): void {
  map.delete(k)
  map.set(k, v)
  while (map.size > max) map.delete(map.keys().next().value as K)
}

export class Authenticator {
  private readonly keys = new Map<string, Cached<KeyRecord | null>>()
  private readonly accounts = new Map<number, Cached<AccountFlags | null>>()
  private readonly adminDigest: Buffer
  /**
   * Raw key -> its SHA-256 hex, for keys whose record is cached (the fast path skips the
   * ~1.5 µs hash). Bounded: cleared whole at FAST_HASHES entries; held only in this process's
   * memory, like the request that carried the key.
   */
  private readonly hashes = new Map<string, string>()
  /** key id -> last use time, flushed with the metering batch. */
  readonly lastUsed = new Map<number, number>()
  onInvalidate: ((kind: 'key' | 'account', id: string) => void) | null = null

  /** `maxEntries`: per cache (keys, accounts); ~300 bytes an entry, so ~30 MB each at the default. */
  constructor (
    private readonly sql: Sql, private readonly jwtSecret: string, adminToken: string, private readonly ttlMs = 5000,
    private readonly maxEntries = 100_000
  ) {
    this.adminDigest = createHash('sha256').update(adminToken).digest()
  }

  /** Entries held by the key and account caches (tests, metrics). */
  get cacheSizes (): { keys: number; accounts: number } { return { keys: this.keys.size, accounts: this.accounts.size } }

  invalidateKey (hash: string, broadcast = true): void {
    this.keys.delete(hash)
    this.hashes.clear()
    if (broadcast) this.onInvalidate?.('key', hash)
  }

  invalidateAccount (id: number, broadcast = true): void {
    this.accounts.delete(id)
    if (broadcast) this.onInvalidate?.('account', String(id))
  }

  /**
   * A hot entry is reloaded in the background once it is half its life old, so requests never
   * wait for PostgreSQL on it, and no entry older than `ttlMs` is ever used. The reload is
   * dropped if the entry was invalidated or replaced meanwhile (it may predate that change).
   */
  private fresh<K, V> (map: Map<K, Cached<V>>, k: K, c: Cached<V> | undefined, now: number, load: () => Promise<V>): boolean {
    if (!c || now - c.at >= this.ttlMs) return false
    if (now - c.at >= this.ttlMs / 2 && !c.reloading) {
      c.reloading = true
      load().then((v) => { if (map.get(k) === c && v !== null) map.set(k, { v, at: now }) }, () => {}).finally(() => { c.reloading = false })
    }
    return true
  }

  async account (id: number): Promise<AccountFlags | null> {
    const now = Date.now()
    const c = this.accounts.get(id)
    if (this.fresh(this.accounts, id, c, now, () => this.loadAccount(id))) return c!.v
    const v = await this.loadAccount(id)
    // A miss is not cached: the id may be created a moment later (signup, operator), and only a
    // correctly signed session can ask for an id without an account behind it.
    if (v !== null) setBounded(this.accounts, id, { v, at: now }, this.maxEntries)
    else this.accounts.delete(id)
    return v
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
    if (this.fresh(this.keys, hash, c, now, () => this.loadKey(hash))) return c!.v
    const v = await this.loadKey(hash)
    setBounded(this.keys, hash, { v, at: now }, this.maxEntries) // unknown keys too: bounded
    return v
  }

  private async loadKey (hash: string): Promise<KeyRecord | null> {
    const row = await findKeyByHash(this.sql, hash)
    return row
      ? {
        id: row.id, accountId: row.account_id, scopes: row.scopes as Scope[], expiresAt: row.expires_at ? row.expires_at.getTime() : null,
        revoked: row.revoked_at !== null
      }
      : null
  }

  /**
   * The synchronous fast path (issue 13): the Caller of a `key` route's request whose API key
   * (X-API-Key, or Authorization: Bearer gjs_sk_...) and account are cached, fresh, valid and
   * carry the route's scope; undefined for anything else, which `authenticate` then answers
   * (errors included). No promise, no allocation on a hit.
   */
  fastCaller (route: Route, apiKeyHeader: string, authorization: string): Caller | undefined {
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
    const now = Date.now()
    const c = this.keys.get(hash)
    if (!this.fresh(this.keys, hash, c, now, () => this.loadKey(hash))) return undefined
    const rec = c!.v
    if (rec === null || rec.revoked || (rec.expiresAt !== null && rec.expiresAt <= now)) return undefined
    const a = this.accounts.get(rec.accountId)
    if (!this.fresh(this.accounts, rec.accountId, a, now, () => this.loadAccount(rec.accountId))) return undefined
    const acct = a!.v
    if (acct === null || acct.banned) return undefined
    if (route.scope !== undefined && !rec.scopes.includes(route.scope)) return undefined
    if (!memo) {
      if (this.hashes.size >= FAST_HASHES) this.hashes.clear()
      this.hashes.set(key, hash)
    }
    this.lastUsed.set(rec.id, now)
    const tier = tierOf(acct)
    let caller = rec.caller
    if (caller === undefined || caller.tier !== tier) caller = rec.caller = { kind: 'key', accountId: rec.accountId, keyId: rec.id, tier, scopes: rec.scopes, bucket: `k${rec.id}` }
    return caller
  }

  /** Operator token check, constant time (DESIGN.md section 7). */
  checkAdmin (authorization: string | undefined): Caller {
    const token = bearer(authorization)
    if (token === undefined) throw new ApiError('AUTH_REQUIRED', 'Operator routes need Authorization: Bearer <ADMIN_TOKEN>')
    const given = createHash('sha256').update(token).digest()
    if (!timingSafeEqual(given, this.adminDigest)) throw new ApiError('TOKEN_INVALID', 'Operator token is wrong')
    return { kind: 'admin', accountId: 0, keyId: null, tier: 'enterprise', scopes: ['generate', 'read'], bucket: 'admin' }
  }

  /**
   * Authenticates a request for `route` and checks its scope. Credentials come from
   * X-API-Key or Authorization: Bearer; `?api_key=` is always refused (SPEC.md 5.1).
   */
  async authenticate (route: Route, headers: Record<string, string>, query: URLSearchParams): Promise<Caller> {
    if (query.has('api_key')) throw new ApiError('INVALID_API_KEY', 'API keys in the query string are never accepted; send X-API-Key or Authorization: Bearer')
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
      if (route.auth === 'session') {
        throw new ApiError('insufficient_scope', 'API key management needs a dashboard session (JWT), not an API key', { required_scope: 'session' })
      }
    } else {
      caller = await this.fromSession(jwt!, route.auth !== 'session')
    }
    if (route.scope !== undefined && !caller.scopes.includes(route.scope)) {
      throw new ApiError('insufficient_scope', `This route needs the ${route.scope} scope`, { required_scope: route.scope })
    }
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
