/**
 * Webhook delivery rules (docs/api.md "Webhooks"; docs/architecture.md "Threads"; webhook delivery
 * body", "SSRF"): signing, the retry schedule, how an answer is judged, and where a delivery may
 * connect. Pure functions plus two small I/O builders with injectable DNS (a guarded undici
 * connector and the registration-time resolver), so all of it is unit-tested without a network.
 * The loop that uses them is src/webhooks/delivery-worker.ts.
 */
import { createHmac, createSecretKey, type KeyObject } from 'node:crypto'
import { lookup as dnsLookup } from 'node:dns/promises'
import type { LookupAddress } from 'node:dns'
import type { LookupFunction, Socket } from 'node:net'
import { buildConnector } from 'undici'
import { classifyHost, isAllowlistedHost, isIpLiteral, isPublicIpLiteral, parseIPv4, parseIPv6 } from '../catalog/url.js'

/** Delay before retry n (n = 1..10) after a failed attempt, in seconds (docs/api.md "Webhooks"). */
export const RETRY_SCHEDULE_S: readonly number[] = [5, 30, 120, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600]
/** The first attempt plus one per schedule entry; after the last one a delivery is `failed`. */
export const MAX_ATTEMPTS = RETRY_SCHEDULE_S.length + 1
/** Whole-request timeout of one attempt (docs/api.md "Webhooks"). */
export const DELIVERY_TIMEOUT_MS = 10_000
/** How long a claimed row is ours; longer than any attempt, so only a dead node's rows expire. */
export const CLAIM_LEASE_S = 60

/**
 * `X-Service-Signature: t=<unix seconds>,sha256=<hex>`, the hex being HMAC-SHA256 keyed with
 * the secret over `<t>.<raw body>` (docs/api.md "Webhooks"). `t` is the time of this attempt, so a retry
 * a day later still passes the receiver's 300 s window.
 */
export function signatureHeader (secret: string, body: string, t: number): string {
  return `t=${t},sha256=${hmacHex(secret, `${t}.${body}`)}`
}

/** Secrets as key objects, made once per secret instead of once per attempt. */
const hmacKeys = new Map<string, KeyObject>()

function hmacHex (secret: string, data: string): string {
  let key = hmacKeys.get(secret)
  if (key === undefined) {
    if (hmacKeys.size >= 10_000) hmacKeys.clear()
    key = createSecretKey(Buffer.from(secret, 'utf8'))
    hmacKeys.set(secret, key)
  }
  return createHmac('sha256', key).update(data, 'utf8').digest('hex')
}

/** The headers of one attempt (docs/api.md "Webhooks"), as an object (deliveryHeaderList's pairs). */
export function deliveryHeaders (d: { id: string; event: string; secret: string; body: string }, t: number, userAgent: string): Record<string, string> {
  const list = deliveryHeaderList(d, t, userAgent, null)
  const h: Record<string, string> = {}
  for (let i = 0; i < list.length; i += 2) h[list[i]] = list[i + 1]
  return h
}

/**
 * The headers of one attempt (docs/api.md "Webhooks") as undici's flat [name, value, ...] list (no object
 * per attempt), with `authorization` when the URL carried credentials. The delivery id is the
 * receivers' dedupe key.
 */
export function deliveryHeaderList (
  d: { id: string; event: string; secret: string; body: string }, t: number, userAgent: string, auth: string | null,
): string[] {
  const h = [
    'content-type', 'application/json',
    'user-agent', userAgent,
    'x-service-event', d.event,
    'x-service-delivery', d.id,
    'x-service-signature', signatureHeader(d.secret, d.body, t),
  ]
  if (auth !== null) h.push('authorization', auth)
  return h
}

/**
 * Credentials in the URL (`https://user:pass@host/...`) become an `Authorization: Basic` header
 * and are removed from the URL (undici would silently drop them). Null without credentials.
 */
export function basicAuthOf (url: URL): string | null {
  if (url.username === '' && url.password === '') return null
  const decode = (v: string) => { try { return decodeURIComponent(v) } catch { return v } }
  const value = `Basic ${Buffer.from(`${decode(url.username)}:${decode(url.password)}`).toString('base64')}`
  url.username = ''
  url.password = ''
  return value
}

/**
 * Milliseconds to wait after `attemptsMade` attempts have failed, or null when none is left
 * (the delivery is then `failed`). `scale` is WEBHOOK_RETRY_SCALE (tests shrink the schedule).
 */
export function retryDelayMs (attemptsMade: number, scale = 1): number | null {
  if (!Number.isInteger(attemptsMade) || attemptsMade < 1 || attemptsMade > RETRY_SCHEDULE_S.length) return null
  return Math.round(RETRY_SCHEDULE_S[attemptsMade - 1] * 1000 * scale)
}

/**
 * How an HTTP answer ends an attempt: any 2xx delivers; 410 Gone means "stop sending" (the
 * delivery is disabled, and a registered webhook deactivated); everything else, redirects
 * included (never followed: the Location could point anywhere), is retried.
 */
export function classifyStatus (status: number): 'delivered' | 'gone' | 'retry' {
  if (status >= 200 && status < 300) return 'delivered'
  if (status === 410) return 'gone'
  return 'retry'
}

/** What one attempt observed. `permanent`: the URL itself can never be delivered to. */
export interface AttemptResult {
  statusCode: number | null
  latencyMs: number | null
  error: string | null
  permanent?: boolean
}

/** The delivery's state after an attempt. */
export interface Outcome {
  status: 'delivered' | 'pending' | 'failed' | 'disabled'
  /** When pending: wait this long before the next attempt. */
  delayMs: number | null
  /** For a registered webhook answering 410: deactivate it with this reason. */
  disableWebhook: string | null
}

/** Decides the state after attempt number `attempt` (1-based) produced `r`. */
export function outcomeOf (r: AttemptResult, attempt: number, opts: { scale?: number; registered: boolean }): Outcome {
  if (r.statusCode !== null) {
    const c = classifyStatus(r.statusCode)
    if (c === 'delivered') return { status: 'delivered', delayMs: null, disableWebhook: null }
    if (c === 'gone') {
      return { status: 'disabled', delayMs: null, disableWebhook: opts.registered ? 'receiver answered 410 Gone' : null }
    }
  }
  if (r.permanent) return { status: 'failed', delayMs: null, disableWebhook: null }
  const delay = retryDelayMs(attempt, opts.scale ?? 1)
  if (delay === null) return { status: 'failed', delayMs: null, disableWebhook: null }
  return { status: 'pending', delayMs: delay, disableWebhook: null }
}

// ---- SSRF ---------------------------------------------------------------------------------

/** Why an address is not public, for error messages and tests. `public` when it is. */
export type AddressKind =
  | 'public' | 'unspecified' | 'loopback' | 'private' | 'link-local' | 'metadata' | 'cgnat'
  | 'unique-local' | 'multicast' | 'reserved' | 'invalid'

const V4_KINDS: ReadonlyArray<readonly [string, number, AddressKind]> = [
  ['169.254.169.254', 32, 'metadata'],
  ['0.0.0.0', 8, 'unspecified'],
  ['127.0.0.0', 8, 'loopback'],
  ['10.0.0.0', 8, 'private'],
  ['172.16.0.0', 12, 'private'],
  ['192.168.0.0', 16, 'private'],
  ['169.254.0.0', 16, 'link-local'],
  ['100.64.0.0', 10, 'cgnat'],
  ['224.0.0.0', 4, 'multicast'],
]

function v4Kind (n: number): AddressKind {
  for (const [base, bits, kind] of V4_KINDS) {
    const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0
    if (((n & mask) >>> 0) === (((parseIPv4(base) as number) & mask) >>> 0)) return kind
  }
  return 'reserved'
}

/**
 * Classifies a resolved or literal address. The verdict public / not public is
 * `isPublicIpLiteral` (src/catalog/url.ts, the one rule for the whole service); this only
 * names the reason. fd00:ec2::254 (the AWS IPv6 metadata address) is named `metadata`.
 */
export function addressKind (address: string): AddressKind {
  const v4 = parseIPv4(address)
  const v6 = v4 === null ? parseIPv6(address) : null
  if (v4 === null && v6 === null) return 'invalid'
  if (isPublicIpLiteral(address)) return 'public'
  if (v4 !== null) return v4Kind(v4)
  const b = v6 as number[]
  const zeros = (from: number, to: number): boolean => b.slice(from, to).every(x => x === 0)
  if (zeros(0, 10) && b[10] === 0xff && b[11] === 0xff) return v4Kind(((b[12] << 24) >>> 0) + (b[13] << 16) + (b[14] << 8) + b[15])
  if (zeros(0, 16)) return 'unspecified'
  if (zeros(0, 15) && b[15] === 1) return 'loopback'
  if (b[0] === 0xfd && b[1] === 0x00 && b[2] === 0x0e && b[3] === 0xc2 && zeros(4, 14) && b[14] === 0x02 && b[15] === 0x54) return 'metadata'
  if ((b[0] & 0xfe) === 0xfc) return 'unique-local'
  if (b[0] === 0xfe && (b[1] & 0xc0) === 0x80) return 'link-local'
  if (b[0] === 0xff) return 'multicast'
  return 'reserved'
}

/** Raised for a destination the SSRF rules refuse; `code` lets the worker tell it apart. */
export class RefusedDestination extends Error {
  readonly code = 'EREFUSED_DESTINATION'
  constructor (message: string) { super(message); this.name = 'RefusedDestination' }
}

/** Null when the address is public, else the refusal message. */
export function addressError (address: string, host = address): string | null {
  const kind = addressKind(address)
  if (kind === 'public') return null
  const what = kind === 'invalid' ? 'not an IP address' : `a ${kind} address`
  return host === address ? `refused: ${address} is ${what}` : `refused: ${host} resolves to ${address}, ${what}`
}

/**
 * Checks a delivery URL before any connection: parseable, http(s), https unless the host[:port]
 * is in WEBHOOK_ALLOWLIST, and not `localhost` nor a non-public IP literal. A refusal here can
 * never change by waiting (the URL is stored with the delivery), so the worker fails it at once.
 * Returns `{ url, allowlisted }` or `{ error }`.
 */
export function checkDestination (raw: string, allowlist: readonly string[]): { url: URL; allowlisted: boolean } | { error: string } {
  let url: URL
  try { url = new URL(raw) } catch { return { error: 'refused: not a valid URL' } }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return { error: `refused: ${url.protocol} URLs are not delivered` }
  if (isAllowlistedHost(url, allowlist)) return { url, allowlisted: true }
  if (url.protocol !== 'https:') return { error: 'refused: webhook URLs must use https' }
  const cls = classifyHost(url.hostname)
  if (cls === 'localhost') return { error: `refused: ${url.hostname} is a loopback name` }
  if (cls === 'invalid') return { error: 'refused: invalid host' }
  if (cls === 'non-public-ip') return { error: addressError(url.hostname.replace(/^\[|\]$/g, '')) as string }
  return { url, allowlisted: false }
}

/** Resolves a name to every address (dns.lookup semantics: hosts file, then DNS). */
export type LookupAll = (hostname: string) => Promise<LookupAddress[]>

export const systemLookupAll: LookupAll = (hostname) => dnsLookup(hostname, { all: true, verbatim: true })

/**
 * A `net.connect` lookup that resolves every address of the name and refuses the connection
 * when ANY of them is not public (the same rule as registration: a name with one private
 * address is treated as private). The socket can then only connect to a vetted address.
 */
export function guardedLookup (lookupAll: LookupAll = systemLookupAll): LookupFunction {
  return (hostname, options, callback) => {
    lookupAll(hostname).then((all) => {
      const family = options.family === 4 || options.family === 'IPv4' ? 4 : options.family === 6 || options.family === 'IPv6' ? 6 : 0
      const addrs = family === 0 ? all : all.filter(a => a.family === family)
      if (addrs.length === 0) {
        const e = Object.assign(new Error(`DNS: ${hostname} has no address`), { code: 'ENOTFOUND' })
        callback(e, '', 0)
        return
      }
      for (const a of all) {
        const err = addressError(a.address, hostname)
        if (err !== null) { callback(new RefusedDestination(err) as NodeJS.ErrnoException, '', 0); return }
      }
      if (options.all) callback(null, addrs)
      else callback(null, addrs[0].address, addrs[0].family)
    }, (err: NodeJS.ErrnoException) => callback(err, '', 0))
  }
}

/**
 * The undici connector of the delivery pool. Allowlisted host[:port] connect unchecked; any other
 * host must be https, its name is resolved through `guardedLookup`, and the address the socket
 * actually connected to is checked once more (IP literals bypass lookup; this also covers any
 * resolver path we did not foresee). So a DNS answer that changes between registration and
 * delivery (rebinding) cannot reach a private address.
 */
export function guardedConnector (opts: { allowlist: readonly string[]; lookupAll?: LookupAll; timeoutMs?: number }): buildConnector.connector {
  const timeout = opts.timeoutMs ?? DELIVERY_TIMEOUT_MS
  const open = buildConnector({ timeout })
  const guarded = buildConnector({ timeout, lookup: guardedLookup(opts.lookupAll) })
  return (o, callback) => {
    const host = o.hostname.includes(':') ? `[${o.hostname}]` : o.hostname
    let url: URL
    try { url = new URL(`${o.protocol}//${host}${o.port ? `:${o.port}` : ''}/`) } catch {
      callback(new RefusedDestination('refused: invalid host'), null)
      return
    }
    if (isAllowlistedHost(url, opts.allowlist)) { open(o, callback); return }
    if (o.protocol !== 'https:') { callback(new RefusedDestination('refused: webhook URLs must use https'), null); return }
    // An IP literal is never passed to lookup by net.connect: judge it before connecting.
    const literalError = isIpLiteral(o.hostname) ? addressError(o.hostname) : null
    if (literalError !== null) { callback(new RefusedDestination(literalError), null); return }
    guarded(o, (err, socket) => {
      if (err) { callback(err, null); return }
      const s = socket as Socket
      const why = connectedAddressError(s, o.hostname)
      if (why !== null) {
        s.destroy()
        callback(new RefusedDestination(why), null)
        return
      }
      callback(null, s)
    })
  }
}

/**
 * The last check, on the socket itself: the address it is connected to must be public. With
 * `guardedLookup` this cannot fail; it is here so that no resolver path (a literal, a cached
 * answer, a future Node change) reaches a private address unnoticed.
 */
export function connectedAddressError (socket: { remoteAddress?: string }, host: string): string | null {
  return socket.remoteAddress ? addressError(socket.remoteAddress, host) : 'refused: could not read the connected address'
}

/** How long a webhook URL's host name may take to resolve at registration (docs/decisions.md "Webhook URL policy"). */
export const REGISTRATION_DNS_TIMEOUT_MS = 2000

/**
 * Registration-time resolution (docs/api.md "Webhooks"): every address must
 * be public where DNS answers. A name DNS says does not exist (ENOTFOUND / ENODATA) is
 * `unresolved`, accepted then, and the delivery-time check on the connected address guards it.
 * A resolver that does not answer within `timeoutMs`, or answers "try again", is `timeout`: the
 * name is NOT accepted on a slow answer (the caller answers 503 with Retry-After).
 */
export async function resolveForRegistration (hostname: string, lookupAll: LookupAll = systemLookupAll, timeoutMs = REGISTRATION_DNS_TIMEOUT_MS): Promise<'public' | 'non-public' | 'unresolved' | 'timeout'> {
  let timer: NodeJS.Timeout | undefined
  const timedOut = new Promise<'timeout'>(resolve => { timer = setTimeout(() => resolve('timeout'), timeoutMs) })
  try {
    const all = await Promise.race([
      lookupAll(hostname).catch((err: { code?: string }) => err?.code === 'ENOTFOUND' || err?.code === 'ENODATA' ? [] : 'timeout' as const),
      timedOut,
    ])
    if (all === 'timeout') return 'timeout'
    if (all.length === 0) return 'unresolved'
    return all.every(a => isPublicIpLiteral(a.address)) ? 'public' : 'non-public'
  } finally {
    clearTimeout(timer)
  }
}

/** A short, single-line description of a failed request for `last_error`. */
export function describeError (err: unknown): string {
  const e = err as { name?: string; code?: string; message?: string; cause?: unknown }
  if (e?.name === 'TimeoutError') return `timeout: no answer within ${DELIVERY_TIMEOUT_MS / 1000} s`
  if (e instanceof RefusedDestination) return e.message
  const cause = e?.cause as { code?: string; message?: string } | undefined
  if (cause instanceof RefusedDestination) return cause.message
  const code = e?.code ?? cause?.code
  const msg = (e?.message ?? String(err)).replace(/\s+/g, ' ')
  return (code && !msg.includes(code) ? `${code}: ${msg}` : msg).slice(0, 500)
}
