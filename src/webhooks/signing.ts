/**
 * The signed headers of one webhook attempt (docs/api.md "Webhooks"): `X-Service-Signature`,
 * the event and delivery id, and `Authorization: Basic` from credentials in the URL. Used the
 * same way by the delivery pool (src/webhooks/delivery-worker.ts) and the manual sends
 * (src/webhooks/delivery-now.ts).
 */
import { createHmac, createSecretKey, type KeyObject } from 'node:crypto'
import { checkDestination } from '../net/address-policy.js'

/** A delivery as far as its headers go. */
export interface SignedDelivery { id: string; event: string; secret: string; body: string }

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

/**
 * The headers of one attempt (docs/api.md "Webhooks") as undici's flat [name, value, ...] list (no object
 * per attempt), with `authorization` when the URL carried credentials. The delivery id is the
 * receivers' dedupe key.
 */
export function deliveryHeaderList (d: SignedDelivery, t: number, userAgent: string, auth: string | null): string[] {
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

/** The headers of one attempt as an object (deliveryHeaderList's pairs). */
export function deliveryHeaders (d: SignedDelivery, t: number, userAgent: string, auth: string | null = null): Record<string, string> {
  const list = deliveryHeaderList(d, t, userAgent, auth)
  const h: Record<string, string> = {}
  for (let i = 0; i < list.length; i += 2) h[list[i]] = list[i + 1]
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
 * A delivery URL as it is sent: checked by the address policy (checkDestination; a refusal is
 * permanent), its fragment dropped and its credentials moved to `auth`.
 */
export function deliveryTarget (raw: string, allowlist: readonly string[]): { url: URL; auth: string | null } | { error: string } {
  const c = checkDestination(raw, allowlist)
  if ('error' in c) return c
  c.url.hash = ''
  return { url: c.url, auth: basicAuthOf(c.url) }
}
