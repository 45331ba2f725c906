/**
 * Pure URL and host checks for media inputs and webhook targets (docs/api.md "Uploads" and
 * "Webhooks", and the webhook SSRF rules). No DNS here: a host name
 * is classified as `name`; the webhook code resolves names and checks every address it connects
 * to with `isPublicIpLiteral`, which is why that function accepts bare resolver output too.
 */
import { ApiError } from '../errors.js'

/** Longest URL accepted anywhere (docs/api.md "Jobs"; URIs of at most 2048 characters). */
export const MAX_URL_LENGTH = 2048

/**
 * How a host looks without resolving it:
 * - `localhost`: a loopback name (`localhost`, `*.localhost`, ...);
 * - `non-public-ip`: an IP literal outside the public unicast ranges;
 * - `public-ip`: an IP literal in the public ranges;
 * - `name`: any other host name (public or not is only known after DNS);
 * - `invalid`: not a host at all.
 */
export type HostClass = 'localhost' | 'non-public-ip' | 'public-ip' | 'name' | 'invalid'

/**
 * Parses a strict dotted-quad IPv4 address (what resolvers and the WHATWG URL parser emit)
 * into an unsigned 32-bit number, or null. Leading zeros are refused: their meaning (octal or
 * decimal) differs between parsers, so they are never taken as an address.
 */
export function parseIPv4 (s: string): number | null {
  const parts = s.split('.')
  if (parts.length !== 4) return null
  let n = 0
  for (const p of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p)) return null
    const v = Number(p)
    if (v > 255) return null
    n = n * 256 + v
  }
  return n
}

/**
 * Parses an IPv6 address (optional brackets, optional `%zone`, optional dotted IPv4 tail) into
 * its 16 bytes, or null.
 */
export function parseIPv6 (input: string): number[] | null {
  let s = input
  if (s.startsWith('[') && s.endsWith(']')) s = s.slice(1, -1)
  const zone = s.indexOf('%')
  if (zone >= 0) s = s.slice(0, zone)
  if (!s.includes(':')) return null
  // A dotted IPv4 tail (::ffff:1.2.3.4) becomes two hex groups.
  const lastColon = s.lastIndexOf(':')
  const last = s.slice(lastColon + 1)
  if (last.includes('.')) {
    const v4 = parseIPv4(last)
    if (v4 === null) return null
    s = s.slice(0, lastColon + 1) + (v4 >>> 16).toString(16) + ':' + (v4 & 0xffff).toString(16)
  }
  const halves = s.split('::')
  if (halves.length > 2) return null
  const groups = (h: string): number[] | null => {
    if (h === '') return []
    const out: number[] = []
    for (const g of h.split(':')) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null
      out.push(parseInt(g, 16))
    }
    return out
  }
  const head = groups(halves[0])
  if (head === null) return null
  let all: number[]
  if (halves.length === 2) {
    const tail = groups(halves[1])
    if (tail === null || head.length + tail.length > 7) return null
    all = [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail]
  } else {
    if (head.length !== 8) return null
    all = head
  }
  const bytes: number[] = []
  for (const g of all) bytes.push(g >> 8, g & 0xff)
  return bytes
}

/** IPv4 ranges that are not publicly routable (RFC 6890 special-purpose registry). */
const IPV4_NON_PUBLIC: ReadonlyArray<readonly [string, number]> = [
  ['0.0.0.0', 8], // "this network"
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, includes the 169.254.169.254 metadata service
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // TEST-NET-1
  ['192.88.99.0', 24], // deprecated 6to4 relay anycast
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // TEST-NET-2
  ['203.0.113.0', 24], // TEST-NET-3
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, includes the 255.255.255.255 broadcast
]
const IPV4_NON_PUBLIC_NUM = IPV4_NON_PUBLIC.map(([base, bits]) => {
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0
  return [((parseIPv4(base) as number) & mask) >>> 0, mask] as const
})

function isPublicIPv4Number (n: number): boolean {
  for (const [base, mask] of IPV4_NON_PUBLIC_NUM) if (((n & mask) >>> 0) === base) return false
  return true
}

function v4At (b: number[], i: number): number {
  return ((b[i] << 24) >>> 0) + (b[i + 1] << 16) + (b[i + 2] << 8) + b[i + 3]
}

/**
 * IPv6 is judged by allow-list: only global unicast 2000::/3 can be public, minus the
 * documentation and IETF-assignment blocks; forms that embed an IPv4 address (mapped, NAT64,
 * 6to4) are public only when the embedded address is. Everything else, including ::, ::1,
 * fc00::/7 (ULA), fe80::/10 (link-local) and ff00::/8 (multicast), is non-public.
 */
function isPublicIPv6Bytes (b: number[]): boolean {
  const zeros = (from: number, to: number): boolean => b.slice(from, to).every(x => x === 0)
  // ::ffff:a.b.c.d (IPv4-mapped)
  if (zeros(0, 10) && b[10] === 0xff && b[11] === 0xff) return isPublicIPv4Number(v4At(b, 12))
  // 64:ff9b::a.b.c.d (well-known NAT64 prefix)
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zeros(4, 12)) return isPublicIPv4Number(v4At(b, 12))
  if ((b[0] & 0xe0) !== 0x20) return false // outside 2000::/3
  // 2002::/16 (6to4) carries an IPv4 address in bytes 2..5
  if (b[0] === 0x20 && b[1] === 0x02) return isPublicIPv4Number(v4At(b, 2))
  // 2001::/23 IETF protocol assignments (Teredo, ORCHID, benchmarking...)
  if (b[0] === 0x20 && b[1] === 0x01 && (b[2] & 0xfe) === 0x00) return false
  // 2001:db8::/32 documentation
  if (b[0] === 0x20 && b[1] === 0x01 && b[2] === 0x0d && b[3] === 0xb8) return false
  // 3fff::/20 documentation (RFC 9637)
  if (b[0] === 0x3f && b[1] === 0xff && (b[2] & 0xf0) === 0x00) return false
  return true
}

/**
 * True when `s` is an IPv4 or IPv6 literal (brackets optional) in a public range. False for
 * non-public literals AND for anything that is not an IP literal, so a caller checking resolved
 * addresses refuses by default.
 */
export function isPublicIpLiteral (s: string): boolean {
  const v4 = parseIPv4(s)
  if (v4 !== null) return isPublicIPv4Number(v4)
  const v6 = parseIPv6(s)
  if (v6 !== null) return isPublicIPv6Bytes(v6)
  return false
}

/** True when `s` is an IPv4 or IPv6 literal at all. */
export function isIpLiteral (s: string): boolean {
  return parseIPv4(s) !== null || parseIPv6(s) !== null
}

/** Names that always mean this machine (RFC 6761 `.localhost` plus common hosts-file names). */
function isLocalhostName (name: string): boolean {
  const n = name.endsWith('.') ? name.slice(0, -1) : name
  return n === 'localhost' || n.endsWith('.localhost') || n === 'localhost.localdomain' ||
    n === 'ip6-localhost' || n === 'ip6-loopback'
}

/**
 * Classifies a host (as in a URL: `example.com`, `10.0.0.1`, `[::1]`). The host is first
 * canonicalised by the WHATWG URL parser, so `0x7f.1`, `2130706433` and `LOCALHOST` are seen as
 * `127.0.0.1` and `localhost`, exactly as an HTTP client would connect to them.
 */
export function classifyHost (host: string): HostClass {
  let hostname: string
  if (parseIPv6(host) !== null) {
    hostname = host.startsWith('[') ? host : `[${host}]`
  } else {
    try {
      hostname = new URL(`http://${host}/`).hostname
    } catch {
      return 'invalid'
    }
  }
  if (hostname === '') return 'invalid'
  if (isIpLiteral(hostname)) return isPublicIpLiteral(hostname) ? 'public-ip' : 'non-public-ip'
  if (isLocalhostName(hostname)) return 'localhost'
  return 'name'
}

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
  const cls = classifyHost(url.hostname)
  if (cls === 'localhost' || cls === 'non-public-ip' || cls === 'invalid') {
    throw new ApiError('UNSUPPORTED_OPTION', `${param} must be a publicly reachable URL; use POST /uploads for local files`, { param })
  }
}

/** True when the URL's host (or host:port, default port filled in) is in the allowlist. */
export function isAllowlistedHost (url: URL, allowlist: readonly string[] | undefined): boolean {
  if (!allowlist || allowlist.length === 0) return false
  const host = url.hostname.toLowerCase()
  const port = url.port || (url.protocol === 'https:' ? '443' : url.protocol === 'http:' ? '80' : '')
  const withPort = `${host}:${port}`
  for (const entry of allowlist) {
    const e = entry.trim().toLowerCase()
    if (e === host || e === withPort) return true
  }
  return false
}

/**
 * Webhook targets (per-job webhook_url and POST /webhooks url): https and publicly routable,
 * else 422 UNSUPPORTED_OPTION naming `param` (docs/api.md "Jobs"). A host (or host:port) in
 * WEBHOOK_ALLOWLIST may be plain http and private (tests, private deployments). A name is
 * accepted here; resolution and the connect-time address check belong to the webhook code.
 */
export function checkWebhookUrl (value: string, policy: UrlPolicy = {}, param = 'webhook_url'): void {
  const url = parseHttpUrl(value, param, '')
  if (isAllowlistedHost(url, policy.webhookAllowlist)) return
  if (url.protocol !== 'https:') throw new ApiError('UNSUPPORTED_OPTION', `${param} must use https`, { param })
  const cls = classifyHost(url.hostname)
  if (cls === 'localhost' || cls === 'non-public-ip' || cls === 'invalid') {
    throw new ApiError('UNSUPPORTED_OPTION', `${param} must be publicly routable`, { param })
  }
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
