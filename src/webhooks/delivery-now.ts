/**
 * One webhook POST sent at once from the API thread, for the manual tools of docs/webhook-tools.md
 * (POST /v1/webhooks/{id}/test and .../deliveries/{delivery_id}/redeliver), with its answer
 * returned to the caller. Same rules as the delivery pool (docs/api.md "Webhooks"): the URL is
 * checked first (deliveryTarget), the socket goes through the address-policy connector (every
 * resolved address public, checked again on the connected address; src/net), redirects are never
 * followed, the whole request has DELIVERY_TIMEOUT_MS, and it is signed with the same headers.
 * Unlike the pool, the answer's first EXCERPT_BYTES are kept whatever its status: the person
 * who pressed "Send test event" wants to see what their receiver said.
 */
import { request } from 'undici'
import { DELIVERY_TIMEOUT_MS, describeError } from './delivery.js'
import { deliveryHeaders, deliveryTarget } from './signing.js'
import { guardedAgent } from '../net/agents.js'
import type { LookupAll } from '../net/dns-guard.js'

/** Bytes of the receiver's answer kept and shown. */
export const EXCERPT_BYTES = 1024

/** What a manual send observed. `permanent`: the URL itself is refused (no request was made). */
export interface SendNowResult {
  statusCode: number | null
  latencyMs: number | null
  error: string | null
  excerpt: string | null
  permanent: boolean
}

/**
 * POSTs `d.body` to `d.url` signed with `d.secret` (timestamp: now). Never throws: a refused
 * URL, a connection error or a timeout come back as `error`.
 */
export async function sendNow (
  d: { id: string; event: string; url: string; secret: string; body: string },
  o: { allowlist: readonly string[]; userAgent: string; timeoutMs?: number; lookupAll?: LookupAll },
): Promise<SendNowResult> {
  const dest = deliveryTarget(d.url, o.allowlist)
  if ('error' in dest) return { statusCode: null, latencyMs: null, error: dest.error, excerpt: null, permanent: true }
  const { url, auth } = dest
  const timeoutMs = o.timeoutMs ?? DELIVERY_TIMEOUT_MS
  const headers = deliveryHeaders(d, Math.floor(Date.now() / 1000), o.userAgent, auth)
  const agent = guardedAgent({ allowlist: o.allowlist, lookupAll: o.lookupAll, timeoutMs, pipelining: 0 })
  const started = performance.now()
  try {
    const res = await request(url, {
      method: 'POST', headers, body: d.body, dispatcher: agent, signal: AbortSignal.timeout(timeoutMs),
    })
    const chunks: Buffer[] = []
    let n = 0
    for await (const c of res.body) {
      const b = c as Buffer
      if (n < EXCERPT_BYTES) chunks.push(b.subarray(0, EXCERPT_BYTES - n))
      n += b.length
      if (n >= EXCERPT_BYTES) break
    }
    res.body.destroy()
    const latencyMs = Math.round(performance.now() - started)
    const excerpt = Buffer.concat(chunks).toString('utf8')
    const code = res.statusCode
    let error: string | null = null
    if (code >= 300 && code < 400) error = `HTTP ${code}: redirect${typeof res.headers.location === 'string' ? ` to ${res.headers.location.slice(0, 200)}` : ''} not followed`
    else if (code < 200 || code >= 300) error = `HTTP ${code}${excerpt.trim() ? `: ${excerpt.replace(/\s+/g, ' ').trim().slice(0, 200)}` : ''}`
    return { statusCode: code, latencyMs, error, excerpt: excerpt === '' ? null : excerpt, permanent: false }
  } catch (err) {
    return { statusCode: null, latencyMs: Math.round(performance.now() - started), error: describeError(err), excerpt: null, permanent: false }
  } finally {
    await agent.close().catch(() => {})
  }
}
