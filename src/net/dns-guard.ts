/**
 * The address policy (src/net/address-policy.ts) enforced where names become sockets
 * (docs/architecture.md "Address policy"): a lookup that refuses a name with any non-public
 * address, an undici connector that also checks the address the socket actually connected to
 * (so a DNS answer that changes between registration and use, rebinding, cannot reach a private
 * address), and the registration-time resolution. DNS is injectable (`LookupAll`), so all of it
 * is tested without a network.
 */
import { lookup as dnsLookup } from 'node:dns/promises'
import type { LookupAddress } from 'node:dns'
import type { LookupFunction, Socket } from 'node:net'
import { buildConnector } from 'undici'
import { isPublicIpLiteral } from './ip.js'
import { addressError, refusalMessage, RefusedDestination, targetVerdict } from './address-policy.js'

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
 * An undici connector under the address policy. Allowlisted host[:port] connect unchecked; any
 * other target must pass targetVerdict (https, no loopback name, no non-public literal), its
 * name is resolved through `guardedLookup`, and the address the socket actually connected to is
 * checked once more (IP literals bypass lookup; this also covers any resolver path we did not
 * foresee).
 */
export function guardedConnector (opts: { allowlist: readonly string[]; timeoutMs: number; lookupAll?: LookupAll }): buildConnector.connector {
  const open = buildConnector({ timeout: opts.timeoutMs })
  const guarded = buildConnector({ timeout: opts.timeoutMs, lookup: guardedLookup(opts.lookupAll) })
  return (o, callback) => {
    const host = o.hostname.includes(':') ? `[${o.hostname}]` : o.hostname
    let url: URL
    try { url = new URL(`${o.protocol}//${host}${o.port ? `:${o.port}` : ''}/`) } catch {
      callback(new RefusedDestination('refused: invalid host'), null)
      return
    }
    const v = targetVerdict(url, opts.allowlist)
    if (v === 'allowlisted') { open(o, callback); return }
    // An IP literal is never passed to lookup by net.connect: it is judged here, before connecting.
    if (v !== 'checked') { callback(new RefusedDestination(refusalMessage(v, url)), null); return }
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
