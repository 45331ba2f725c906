/**
 * The URL rules of request fields (docs/api.md "Uploads" and "Webhooks"): media inputs and
 * webhook targets as 422 UNSUPPORTED_OPTION errors naming the field, and how a stored URL is
 * shown back. Pure: which hosts and addresses are acceptable is the address policy
 * (src/net/address-policy.ts), applied here without DNS; names are resolved and every address
 * checked by src/net/dns-guard.ts when the URL is registered or used.
 */
import { ApiError } from '../errors.js'
import { hostRefusal, targetVerdict } from '../net/address-policy.js'

/** Longest URL accepted anywhere (docs/api.md "Jobs"; URIs of at most 2048 characters). */
export const MAX_URL_LENGTH = 2048

/** Where media and webhook URLs may point (docs/operations.md "Configuration": WEBHOOK_ALLOWLIST, PUBLIC_BASE_URL). */
export interface UrlPolicy {
  /** WEBHOOK_ALLOWLIST: `host` or `host:port` entries whose webhooks may be plain http and private. */
  webhookAllowlist?: readonly string[]
  /** PUBLIC_BASE_URL: our own uploads and results live under it and are always accepted as media. */
  publicBaseUrl?: string
}

const baseCache = new Map<string, URL | null>()
function parsedBase (base: string): URL | null {
  let u = baseCache.get(base)
  if (u === undefined) {
    try { u = new URL(base) } catch { u = null }
    if (baseCache.size > 16) baseCache.clear()
    baseCache.set(base, u)
  }
  return u
}

function isUnderBase (url: URL, base: string | undefined): boolean {
  if (!base) return false
  const b = parsedBase(base)
  if (!b || b.origin !== url.origin) return false
  const prefix = b.pathname.endsWith('/') ? b.pathname : b.pathname + '/'
  return prefix === '/' || url.pathname === b.pathname || url.pathname.startsWith(prefix)
}

function parseHttpUrl (value: string, param: string, what: string): URL {
  if (value.length > MAX_URL_LENGTH) throw new ApiError('UNSUPPORTED_OPTION', `${param} must be at most ${MAX_URL_LENGTH} characters`, { param })
  let url: URL
  try { url = new URL(value) } catch {
    throw new ApiError('UNSUPPORTED_OPTION', `${param} must be an absolute URL`, { param })
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ApiError('UNSUPPORTED_OPTION', `${param} must be an http(s) URL${what}`, { param })
  }
  return url
}

/**
 * Media inputs (image_url, *_urls, audio_url): absolute http(s), at most 2048 characters, not
 * localhost nor a non-public IP literal, unless under PUBLIC_BASE_URL (docs/api.md "Uploads").
 * Never fetched or resolved here: the provider fetches them. Throws 422 UNSUPPORTED_OPTION.
 */
export function checkMediaUrl (value: string, param: string, policy: UrlPolicy = {}): void {
  const url = parseHttpUrl(value, param, ' (media inputs must be public URLs; use POST /uploads for local files)')
  if (isUnderBase(url, policy.publicBaseUrl)) return
  if (hostRefusal(url.hostname) !== null) {
    throw new ApiError('UNSUPPORTED_OPTION', `${param} must be a publicly reachable URL; use POST /uploads for local files`, { param })
  }
}

/**
 * Webhook targets (per-job webhook_url and POST /webhooks url): https and publicly routable,
 * else 422 UNSUPPORTED_OPTION naming `param` (docs/api.md "Jobs"). A host (or host:port) in
 * WEBHOOK_ALLOWLIST may be plain http and private (tests, private deployments). A name is
 * accepted here; it is resolved at registration and checked again on every connection
 * (src/net/dns-guard.ts).
 */
export function checkWebhookUrl (value: string, policy: UrlPolicy = {}, param = 'webhook_url'): void {
  const v = targetVerdict(parseHttpUrl(value, param, ''), policy.webhookAllowlist)
  if (v === 'not-https') throw new ApiError('UNSUPPORTED_OPTION', `${param} must use https`, { param })
  if (v !== 'allowlisted' && v !== 'checked') throw new ApiError('UNSUPPORTED_OPTION', `${param} must be publicly routable`, { param })
}

/**
 * The URL as shown back to its owner: a password in its userinfo (`https://user:pw@host/`) is
 * replaced by `****` (docs/operations.md "Hostile input"); the stored URL, used for delivery, keeps it.
 * Text outside the userinfo is returned exactly as given.
 */
export function maskUrlPassword (url: string): string {
  const scheme = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.exec(url)
  if (scheme === null) return url
  const from = scheme[0].length
  let end = url.length
  for (const c of ['/', '?', '#']) { const i = url.indexOf(c, from); if (i >= 0 && i < end) end = i }
  const at = url.lastIndexOf('@', end - 1)
  if (at < from) return url
  const colon = url.indexOf(':', from)
  if (colon < 0 || colon > at) return url
  return `${url.slice(0, colon + 1)}****${url.slice(at)}`
}
