import type { HttpResponse } from 'uWebSockets.js'
import { ApiError } from '../errors.js'

/** JSON bodies are capped at 1 MB (SPEC.md section 8). */
export const JSON_BODY_LIMIT = 1024 * 1024

/**
 * Reads a request body, enforcing the cap while streaming: the promise rejects with
 * PAYLOAD_TOO_LARGE as soon as the running total crosses `limit`, without buffering the rest.
 * Must be called synchronously in the uWS handler (before any await).
 */
export function readBody (res: HttpResponse, limit: number, onTooLarge?: () => void): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let chunks: Buffer[] | null = []
    let total = 0
    res.onData((ab, isLast) => {
      if (chunks === null) return
      total += ab.byteLength
      if (total > limit) {
        chunks = null
        onTooLarge?.()
        reject(new ApiError('PAYLOAD_TOO_LARGE', `Body exceeds ${limit} bytes`))
        return
      }
      // uWS reuses the ArrayBuffer after this callback returns: copy it.
      chunks.push(Buffer.from(ab.slice(0)))
      if (isLast) {
        const c = chunks
        chunks = null
        resolve(c.length === 1 ? c[0] : Buffer.concat(c, total))
      }
    })
  })
}

/**
 * Whether a JSON route reads a body sent with this Content-Type (docs/decisions.md "JSON bodies
 * and Content-Type"): JSON types; none at all; and curl's default for `-d`
 * (application/x-www-form-urlencoded), which the README's examples rely on. Any other type
 * (text/plain, which fetch sends for a string body, multipart, XML) is a client mistake.
 */
export function jsonContentType (contentType: string | undefined): boolean {
  if (contentType === undefined) return true
  const type = contentType.split(';', 1)[0].trim().toLowerCase()
  return type === '' || type === 'application/json' || type === 'application/x-www-form-urlencoded' ||
    (type.startsWith('application/') && type.endsWith('+json'))
}

/**
 * Parses a JSON body; an empty body is `undefined`. A body sent with a non-JSON Content-Type
 * is 415 UNSUPPORTED_MEDIA_TYPE; malformed JSON is 400 VALIDATION_ERROR.
 */
export function parseJson (buf: Buffer, contentType?: string): unknown {
  if (buf.length === 0) return undefined
  if (!jsonContentType(contentType)) {
    throw new ApiError('UNSUPPORTED_MEDIA_TYPE', `The body must be sent as application/json, not ${contentType!.split(';', 1)[0].trim().slice(0, 100)}`)
  }
  const text = buf.toString('utf8')
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    // The parser's own words ("No number after minus sign in JSON at position 1") help nobody.
    throw new ApiError('VALIDATION_ERROR', 'The body must be JSON', { details: [{ path: '', message: 'must be JSON' }] })
  }
  // PostgreSQL text cannot hold U+0000: refuse it here as a 400 rather than let the insert fail
  // as a 500. In valid JSON it can only come from a `\u0000` escape, so most bodies skip the walk.
  if (/\\u0000/i.test(text)) {
    const at = nulPath(value, '')
    if (at !== null) throw new ApiError('VALIDATION_ERROR', 'Strings must not contain U+0000 (NUL)', { details: [{ path: at, message: 'must not contain U+0000' }] })
  }
  return value
}

/** JSON Pointer of the first string (value or key) containing U+0000, or null. */
function nulPath (v: unknown, path: string): string | null {
  if (typeof v === 'string') return v.includes('\u0000') ? path : null
  if (v === null || typeof v !== 'object') return null
  for (const [k, x] of Object.entries(v)) {
    const p = `${path}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`
    if (k.includes('\u0000')) return p
    const r = nulPath(x, p)
    if (r !== null) return r
  }
  return null
}
