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

/** Parses a JSON body; an empty body is `undefined`. Malformed JSON is 400 VALIDATION_ERROR. */
export function parseJson (buf: Buffer): unknown {
  if (buf.length === 0) return undefined
  try {
    return JSON.parse(buf.toString('utf8'))
  } catch (e) {
    throw new ApiError('VALIDATION_ERROR', 'Malformed JSON body', { details: [{ path: '', message: (e as Error).message }] })
  }
}
