/**
 * The address (SSRF) policy of every outbound request the service makes to a URL someone else
 * gave it (docs/architecture.md "Address policy"): webhook registration, webhook delivery,
 * provider result downloads. Pure rules on a URL or an address; src/net/dns-guard.ts enforces
 * the same rules on what DNS answers and on the socket actually connected.
 * - A host (or host:port) in WEBHOOK_ALLOWLIST may be plain http and private.
 * - Anything else must be https, and neither a loopback name nor a non-public IP literal.
 * - A name is public only when every address it resolves to is (src/net/dns-guard.ts).
 */
import { addressKind, isIpLiteral, isPublicIpLiteral, parseIPv6 } from './ip.js'

/**
 * How a host looks without resolving it:
 * - `localhost`: a loopback name (`localhost`, `*.localhost`, ...);
 * - `non-public-ip`: an IP literal outside the public unicast ranges;
 * - `public-ip`: an IP literal in the public ranges;
 * - `name`: any other host name (public or not is only known after DNS);
 * - `invalid`: not a host at all.
 */
export type HostClass = 'localhost' | 'non-public-ip' | 'public-ip' | 'name' | 'invalid'

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

/** Why a target URL is refused before any connection (targetVerdict). */
export type TargetRefusal = 'scheme' | 'not-https' | 'localhost' | 'invalid-host' | 'non-public-ip'

/**
 * Why a host can never be a public target without resolving it (a loopback name, not a host,
 * a non-public IP literal), or null (a public literal, or a name still to be resolved).
 * Media inputs are judged by this alone (the provider fetches them, not us).
 */
export function hostRefusal (host: string): 'localhost' | 'invalid-host' | 'non-public-ip' | null {
  const cls = classifyHost(host)
  if (cls === 'localhost') return 'localhost'
  if (cls === 'invalid') return 'invalid-host'
  if (cls === 'non-public-ip') return 'non-public-ip'
  return null
}

/**
 * The one verdict on a target URL before DNS: `allowlisted` (connect unchecked), `checked`
 * (may be tried; a name is still resolved and every address checked), or why it is refused.
 * A refusal can never change by waiting: the URL itself is wrong.
 */
export function targetVerdict (url: URL, allowlist: readonly string[] | undefined): 'allowlisted' | 'checked' | TargetRefusal {
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'scheme'
  if (isAllowlistedHost(url, allowlist)) return 'allowlisted'
  if (url.protocol !== 'https:') return 'not-https'
  return hostRefusal(url.hostname) ?? 'checked'
}

/** The `refused: ...` text of a refusal (a delivery's last_error, a download's error). */
export function refusalMessage (r: TargetRefusal, url: URL): string {
  switch (r) {
    case 'scheme': return `refused: ${url.protocol} URLs are not delivered`
    case 'not-https': return 'refused: webhook URLs must use https'
    case 'localhost': return `refused: ${url.hostname} is a loopback name`
    case 'invalid-host': return 'refused: invalid host'
    case 'non-public-ip': return addressError(url.hostname.replace(/^\[|\]$/g, '')) as string
  }
}

/** Raised for a destination the address policy refuses; `code` lets a caller tell it apart. */
export class RefusedDestination extends Error {
  readonly code = 'EREFUSED_DESTINATION'
  constructor (message: string) { super(message); this.name = 'RefusedDestination' }
}

/** Null when the address is public, else the refusal message (`host` when it was resolved from a name). */
export function addressError (address: string, host = address): string | null {
  const kind = addressKind(address)
  if (kind === 'public') return null
  const what = kind === 'invalid' ? 'not an IP address' : `a ${kind} address`
  return host === address ? `refused: ${address} is ${what}` : `refused: ${host} resolves to ${address}, ${what}`
}

/**
 * Checks a raw target URL before any connection (targetVerdict, with its message). Returns
 * `{ url, allowlisted }` or `{ error }`.
 */
export function checkDestination (raw: string, allowlist: readonly string[]): { url: URL; allowlisted: boolean } | { error: string } {
  let url: URL
  try { url = new URL(raw) } catch { return { error: 'refused: not a valid URL' } }
  const v = targetVerdict(url, allowlist)
  if (v === 'allowlisted' || v === 'checked') return { url, allowlisted: v === 'allowlisted' }
  return { error: refusalMessage(v, url) }
}
