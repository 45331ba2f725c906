import type { HttpResponse } from 'uWebSockets.js'
import { Readable } from 'node:stream'
import { ApiError } from '../errors.js'

/** JSON bodies are capped at 1 MB (docs/operations.md "Hostile input"). */
export const JSON_BODY_LIMIT = 1024 * 1024

/**
 * Lingering close (docs/decisions.md "Answers before the body was read"): an answer that is
 * ready while the body is still arriving waits until the body has been read and dropped, so a
 * client that writes its whole body before reading (Node's http, HTTP/1.0 clients, proxies that
 * send `Connection: close`) reads the answer instead of a write error. Bounded: at most
 * LINGER_BYTES more are read and at most LINGER_MS waited; past either, the answer goes out and
 * the connection is closed (as nginx's lingering_time does). Only for requests that said
 * `Connection: close`: uWS closes those right after the answer, while on a keep-alive
 * connection it goes on reading the body after an early answer (so a client that reads while
 * it writes gets the answer at once).
 */
export const LINGER_BYTES = 16 * 1024 * 1024
export const LINGER_MS = 10_000

/** Why a body stopped being delivered to its consumer. */
export class BodyClosed extends Error {
  readonly code = 'BODY_CLOSED'
}

/**
 * The one reader of a request body: uWS's single onData handler for the request, attached
 * before the first await (uWS drops data that arrives with no handler). It feeds one consumer,
 * chosen once: the whole body buffered up to a cap (`read`, JSON routes) or a Readable with
 * backpressure (`stream`, raw routes). After `drop()` it keeps reading and discards.
 *
 * uWS throws when a response that was answered or aborted is touched, and a throw out of a
 * uWS callback is an uncaught exception: after `settle()` this class never touches the
 * response again, and every call into it is guarded as well.
 */
export class RequestBody {
  /** Bytes received so far. */
  received = 0
  /** The last chunk arrived. */
  ended = false
  /** The response was answered or aborted: pause/resume are never called again. */
  private settled = false
  private paused = false
  private chunks: Buffer[] | null = null
  private limit = 0
  private onRead: ((err: Error | null, body?: Buffer) => void) | null = null
  private readable: Readable | null = null
  private dropping = false
  private dropUntil = Infinity
  private onDrained: (() => void) | null = null

  /**
   * `declared` is the request's Content-Length (NaN when chunked). `onFault` gets whatever a
   * consumer throws while a chunk is handed to it (a 'data' listener runs inside push()): it is
   * reported there and the rest of the body is dropped, never thrown out of uWS's callback.
   */
  constructor (private readonly res: HttpResponse, readonly declared: number, readonly lingers: boolean, onFault: (err: unknown) => void) {
    res.onData((ab, isLast) => {
      try { this.data(ab, isLast) } catch (err) {
        this.dropping = true
        try { this.stopConsumers(new BodyClosed('the body consumer failed')) } catch {}
        this.resume()
        onFault(err)
      }
    })
  }

  /** The whole body, rejected with PAYLOAD_TOO_LARGE as soon as it crosses `limit` (the rest is dropped). */
  read (limit: number): Promise<Buffer> {
    this.limit = limit
    this.chunks = []
    return new Promise((resolve, reject) => {
      this.onRead = (err, body) => { if (err) reject(err); else resolve(body!) }
      if (this.ended) this.deliverRead()
    })
  }

  /** The body as a Readable; the socket is paused while its buffer is full. */
  stream (): Readable {
    const r = new Readable({
      highWaterMark: 256 * 1024,
      read: () => { if (this.paused) this.resume() },
    })
    // Ended with an error when the request is answered or aborted early: a consumer that never
    // listened for errors must not turn that into an uncaught exception.
    r.on('error', () => {})
    this.readable = r
    return r
  }

  /**
   * Stops delivering to the consumer and reads the rest of the body into nothing. Resolves
   * true once the body has ended, false when `maxBytes` more were read or `maxMs` passed first
   * (or the client went away).
   */
  drop (maxBytes = LINGER_BYTES, maxMs = LINGER_MS): Promise<boolean> {
    this.stopConsumers(new BodyClosed('the request was answered before its body was read'))
    this.dropping = true
    if (this.ended) return Promise.resolve(true)
    if (this.settled) return Promise.resolve(false)
    this.resume()
    this.dropUntil = this.received + maxBytes
    return new Promise((resolve) => {
      const timer = setTimeout(() => { this.onDrained = null; resolve(false) }, maxMs)
      this.onDrained = () => { clearTimeout(timer); resolve(this.ended) }
    })
  }

  /**
   * Stops delivering and reads the rest into nothing, without waiting for it: for an answer
   * written at once (uWS goes on reading a keep-alive request's body after the answer).
   */
  discard (): void {
    this.stopConsumers(new BodyClosed('the request was answered before its body was read'))
    this.dropping = true
    this.resume()
  }

  /** The answer was written or the client went away: never touch the response again. */
  settle (aborted: boolean): void {
    this.settled = true
    if (aborted) {
      this.stopConsumers(new ApiError('VALIDATION_ERROR', 'Client closed the connection before the body was complete'))
      const f = this.onDrained
      this.onDrained = null
      f?.()
    }
  }

  private stopConsumers (err: Error): void {
    if (this.onRead !== null) {
      const f = this.onRead
      this.onRead = null
      this.chunks = null
      f(err)
    }
    if (this.readable !== null) {
      const r = this.readable
      this.readable = null
      if (!r.destroyed && !r.readableEnded) r.destroy(err)
    }
  }

  private data (ab: ArrayBuffer, isLast: boolean): void {
    this.received += ab.byteLength
    if (isLast) this.ended = true
    if (this.chunks !== null) {
      if (this.received > this.limit) {
        this.dropping = true
        this.stopConsumers(new ApiError('PAYLOAD_TOO_LARGE', `Body exceeds ${this.limit} bytes`))
      } else {
        // uWS reuses the ArrayBuffer after this callback returns: copy it.
        this.chunks.push(Buffer.from(ab.slice(0)))
        if (isLast && this.onRead !== null) this.deliverRead()
      }
    } else if (this.readable !== null) {
      const r = this.readable
      const more = r.push(Buffer.from(ab.slice(0)))
      if (isLast) { this.readable = null; r.push(null) } else if (!more) this.pause()
    }
    if (this.onDrained !== null && (isLast || this.received >= this.dropUntil)) {
      const f = this.onDrained
      this.onDrained = null
      f()
    }
  }

  private deliverRead (): void {
    const c = this.chunks!
    const f = this.onRead!
    this.chunks = null
    this.onRead = null
    f(null, c.length === 1 ? c[0] : Buffer.concat(c, this.received))
  }

  private pause (): void {
    if (this.settled || this.paused || this.dropping) return
    this.paused = true
    try { this.res.pause() } catch { this.settled = true }
  }

  private resume (): void {
    if (!this.paused) return
    this.paused = false
    if (this.settled) return
    try { this.res.resume() } catch { this.settled = true }
  }
}

/**
 * Whether a JSON route reads a body sent with this Content-Type (docs/decisions.md "JSON bodies
 * and Content-Type"): JSON types; none at all; and curl's default for `-d`
 * (application/x-www-form-urlencoded), which the curl examples of README.md and docs/api.md rely on. Any other type
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
  // Nesting is bounded: a thread crossing (structured clone) of a value thousands of levels deep
  // overflows the stack. A body shorter than twice the bound cannot be that deep.
  if (text.length > 2 * MAX_JSON_DEPTH && deeperThan(text, MAX_JSON_DEPTH)) {
    throw new ApiError('VALIDATION_ERROR', `The body nests arrays and objects more than ${MAX_JSON_DEPTH} deep`, { details: [{ path: '', message: `must not nest more than ${MAX_JSON_DEPTH} levels` }] })
  }
  // PostgreSQL text and json cannot hold U+0000 nor a lone surrogate: refused here as a 400
  // rather than let the insert fail as a 500. In valid JSON either can only come from a `\u`
  // escape (`\u0000`, `\ud800`), so most bodies skip the walk.
  if (SUSPECT_ESCAPE.test(text)) {
    const bad = badString(value, '')
    if (bad !== null) {
      throw bad[1] === 'nul'
        ? new ApiError('VALIDATION_ERROR', 'Strings must not contain U+0000 (NUL)', { details: [{ path: bad[0], message: 'must not contain U+0000' }] })
        : new ApiError('VALIDATION_ERROR', 'Strings must be well-formed Unicode: a lone surrogate (such as \\ud800 without its pair) is not', { details: [{ path: bad[0], message: 'must not contain a lone surrogate' }] })
    }
  }
  return value
}

/** How deep a JSON body may nest arrays and objects (docs/api.md "Errors"). */
export const MAX_JSON_DEPTH = 64

/** A `\u0000` or surrogate (`\ud800`-`\udfff`) escape. */
const SUSPECT_ESCAPE = /\\u(?:0000|[dD][89a-fA-F])/

/** Whether JSON `text` nests arrays and objects deeper than `max` (strings skipped, escapes included). */
export function deeperThan (text: string, max: number): boolean {
  let depth = 0
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 0x22) { // a string: skip to its closing quote
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i)
        if (d === 0x5c) i++
        else if (d === 0x22) break
      }
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true
    } else if (c === 0x5d || c === 0x7d) depth--
  }
  return false
}

/**
 * JSON Pointer of the first string (value or key) PostgreSQL cannot store, and why: U+0000, or
 * a lone surrogate. Iterative: a deeply nested body cannot overflow the stack.
 */
function badString (root: unknown, rootPath: string): [string, 'nul' | 'surrogate'] | null {
  // [value, its pointer, what is wrong with its own key]
  const stack: Array<[unknown, string, 'nul' | 'surrogate' | null]> = [[root, rootPath, null]]
  while (stack.length > 0) {
    const [v, path, badKey] = stack.pop()!
    if (badKey !== null) return [path, badKey]
    if (typeof v === 'string') { const why = stringFault(v); if (why !== null) return [path, why]; continue }
    if (v === null || typeof v !== 'object') continue
    const entries = Object.entries(v)
    for (let i = entries.length - 1; i >= 0; i--) {
      const [k, x] = entries[i]
      stack.push([x, `${path}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`, stringFault(k)])
    }
  }
  return null
}

/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

function stringFault (s: string): 'nul' | 'surrogate' | null {
  if (s.includes('\u0000')) return 'nul'
  return LONE_SURROGATE.test(s) ? 'surrogate' : null
}
