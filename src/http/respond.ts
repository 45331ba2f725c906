import type { HttpResponse } from 'uWebSockets.js'
import { encode as toonEncode } from '@toon-format/toon'
import { STATUS_CODES } from 'node:http'

const statusLines = new Map<number, string>()
/** `200 OK` style status lines, built once per code. */
export function statusLine (status: number): string {
  let s = statusLines.get(status)
  if (!s) { s = `${status} ${STATUS_CODES[status] ?? 'Unknown'}`; statusLines.set(status, s) }
  return s
}

export type Format = 'json' | 'toon'

const MENTIONS_TOON = /toon/i

/**
 * Content negotiation (docs/api.md "TOON"): TOON only when the client asks for it, that is when
 * `application/toon` (any case) is in Accept with a q above 0 and at least the q of JSON
 * (`application/json`, `application/*`, `*\/*`). An Accept that never mentions it costs one scan.
 */
export function negotiate (accept: string | undefined): Format {
  if (accept === undefined || accept === '' || !MENTIONS_TOON.test(accept)) return 'json'
  let toon = 0
  let json = 0
  for (const range of accept.split(',')) {
    const parts = range.split(';')
    const type = parts[0].trim().toLowerCase()
    let q = 1
    for (let i = 1; i < parts.length; i++) {
      const [k, v] = parts[i].split('=')
      if (k.trim().toLowerCase() === 'q') { const n = Number(v); q = Number.isFinite(n) ? Math.min(Math.max(n, 0), 1) : 0 }
    }
    if (type === 'application/toon') toon = Math.max(toon, q)
    else if (type === 'application/json' || type === 'application/*' || type === '*/*') json = Math.max(json, q)
  }
  return toon > 0 && toon >= json ? 'toon' : 'json'
}

/** Serialisations of bodies returned repeatedly by identity (catalogue, pricing). */
const cache = new WeakMap<object, { json?: Buffer; toon?: Buffer }>()

export function serialize (body: unknown, format: Format, cacheable: boolean): Buffer {
  if (cacheable && body !== null && typeof body === 'object') {
    let c = cache.get(body)
    if (!c) { c = {}; cache.set(body, c) }
    return (c[format] ??= serializeNow(body, format))
  }
  return serializeNow(body, format)
}

function serializeNow (body: unknown, format: Format): Buffer {
  // TOON writes an absent (undefined) field as null; the JSON round trip leaves it out, as JSON does.
  if (format === 'toon') return Buffer.from(toonEncode(JSON.parse(JSON.stringify(body)) as Parameters<typeof toonEncode>[0]))
  return Buffer.from(JSON.stringify(body))
}

export const CONTENT_TYPE: Record<Format, string> = {
  json: 'application/json; charset=utf-8',
  toon: 'application/toon; charset=utf-8',
}

/**
 * Writes a whole response in one cork (uWS: writes after an await must be corked).
 * `closeConnection` is used when the request body was not consumed (413 mid-upload).
 */
export function writeResponse (
  res: HttpResponse, status: number, headers: Record<string, string>, body: Buffer | string | undefined, closeConnection = false, head = false
): void {
  res.cork(() => {
    res.writeStatus(statusLine(status))
    for (const k in headers) res.writeHeader(k, headers[k])
    // HEAD: the headers of the GET answer, Content-Length included, and no body.
    if (body === undefined) res.endWithoutBody(0, closeConnection)
    else if (head) res.endWithoutBody(Buffer.byteLength(body), closeConnection)
    else res.end(body, closeConnection)
  })
}

/** On answers that carry a secret (a session token, an API key, a webhook secret): never cached (docs/operations.md "Hostile input"). */
export const NO_STORE: Readonly<Record<string, string>> = Object.freeze({ 'Cache-Control': 'no-store' })
