import { createHash, randomBytes } from 'node:crypto'

/**
 * API key format (docs/api.md "Accounts, sessions and keys"): a 7-character fixed prefix followed by 64 hex
 * characters, 71 in all. The listing shows the first 12 characters.
 */
export const KEY_PREFIX = 'gjs_sk_'
export const KEY_LENGTH = 71
const KEY_RE = /^gjs_sk_[0-9a-f]{64}$/

export function generateKey (): { key: string; hash: string; prefix: string } {
  const key = KEY_PREFIX + randomBytes(32).toString('hex')
  return { key, hash: hashKey(key), prefix: key.slice(0, 12) }
}

export function hashKey (key: string): string {
  return createHash('sha256').update(key).digest('hex')
}

export function isWellFormedKey (s: string): boolean {
  return s.length === KEY_LENGTH && KEY_RE.test(s)
}

/**
 * Query parameters that carry a credential: always refused (docs/api.md "Accounts, sessions and keys"), whatever else the
 * request carries, since a URL ends up in logs, proxies and browser history. `?key=` is as
 * common a guess as `?api_key=` and gets the same helpful answer (docs/api.md "Accounts, sessions and keys").
 */
const QUERY_CREDENTIALS = ['api_key', 'key', 'apikey', 'api-key', 'x-api-key', 'access_token', 'token']

/** The name of the first credential-looking query parameter, or null. */
export function queryCredential (query: URLSearchParams): string | null {
  for (const name of QUERY_CREDENTIALS) if (query.has(name)) return name
  return null
}

/** True when a bearer credential is meant as an API key rather than a session JWT. */
export function looksLikeKey (s: string): boolean {
  return s.startsWith(KEY_PREFIX)
}
