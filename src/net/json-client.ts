/**
 * The JSON client of provider API calls (docs/architecture.md "Providers and media"): one
 * request over undici with a whole-request timeout and the caller's signal, the answer
 * read up to a size cap, its headers flattened and its body parsed when it is JSON. Two errors,
 * one per failure: NoAnswer (no complete answer: network error, reset, timeout, abort) and
 * AnswerTooLarge. What a status means is the caller's business (src/providers/http.ts).
 */
import { getGlobalDispatcher, type Dispatcher } from 'undici'

/**
 * A provider's JSON (an answer, a callback body, an upstream schema document) as the adapters read
 * it: field by field, each read checked where it matters (typeof, Array.isArray). `any` on purpose:
 * the shapes are the providers' (docs/upstream-models.md), and a typed parse of each would copy
 * their schemas into code that must accept whatever new fields they add.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the one untyped value: see above
export type ProviderJson = any

export interface JsonAnswer {
  status: number
  /** Header names lower-cased; repeated headers joined with ", ". */
  headers: Record<string, string>
  /** The parsed JSON answer; null when the body was empty or not JSON. */
  json: ProviderJson
  text: string
}

export interface JsonRequest {
  headers?: Record<string, string>
  /** Sent as the JSON body with `content-type: application/json`. */
  json?: unknown
  signal?: AbortSignal
  /** Whole request (connect, headers, body), ms. */
  timeoutMs: number
  /** Answers longer than this fail with AnswerTooLarge. */
  maxBytes: number
  /** An undici dispatcher (default: undici's global one). */
  dispatcher?: Dispatcher
}

/** No complete answer: `message` says why (`no answer within N ms`, `aborted`, or the network error). */
export class NoAnswer extends Error {
  override name = 'NoAnswer'
}

/** The answer was longer than the cap; `status` is the answer's status. */
export class AnswerTooLarge extends Error {
  override name = 'AnswerTooLarge'
  constructor (readonly status: number, readonly maxBytes: number) { super(`answer larger than ${maxBytes} bytes`) }
}

/** How often the in-flight requests' deadlines are checked (the granularity of timeoutMs). */
const SWEEP_MS = 100

/** One request in flight: its deadline and how to end it. */
interface InFlight { deadline: number; expire (): void }
const inFlight = new Set<InFlight>()
let sweeper: NodeJS.Timeout | null = null

function sweep (): void {
  const now = Date.now()
  for (const r of inFlight) if (r.deadline <= now) r.expire()
  if (inFlight.size === 0 && sweeper !== null) { clearInterval(sweeper); sweeper = null }
}

function flatten (h: Record<string, string | string[] | undefined>): Record<string, string> {
  const flat: Record<string, string> = {}
  for (const k in h) {
    const v = h[k]
    if (v !== undefined) flat[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v
  }
  return flat
}

/**
 * One request; resolves with any HTTP status. `accept: application/json` unless the caller's
 * headers say otherwise. Sent with undici's `dispatch` and a handler that collects the answer
 * (no stream, no promise per chunk); the whole-request timeout is a deadline that one interval
 * timer of the thread checks for every request in flight, not a timer and a signal per request
 * (docs/decisions.md "Provider calls without a timer each"). A request still waiting for a socket
 * at its deadline ends too.
 */
export function requestJson (method: 'GET' | 'POST' | 'PUT', url: string, o: JsonRequest): Promise<JsonAnswer> {
  const headers: Record<string, string> = { accept: 'application/json', ...o.headers }
  let body: string | undefined
  if (o.json !== undefined) {
    body = JSON.stringify(o.json)
    headers['content-type'] = 'application/json'
  }
  return new Promise<JsonAnswer>((resolve, reject) => {
    let u: URL
    try { u = new URL(url) } catch (err) { reject(new NoAnswer((err as Error).message)); return }
    let controller: Dispatcher.DispatchController | null = null
    let done = false
    let status = 0
    let answerHeaders: Record<string, string> = {}
    const chunks: Buffer[] = []
    let size = 0
    const signal = o.signal
    const end = (err: Error | null, answer?: JsonAnswer): void => {
      if (done) return
      done = true
      inFlight.delete(entry)
      signal?.removeEventListener('abort', onAbort)
      if (err === null) { resolve(answer!); return }
      reject(err)
      // Ends the exchange on our side too: a request still queued is aborted when it starts.
      controller?.abort(err)
    }
    const entry: InFlight = { deadline: Date.now() + o.timeoutMs, expire: () => end(new NoAnswer(`no answer within ${o.timeoutMs} ms`)) }
    const onAbort = (): void => end(new NoAnswer('aborted'))
    if (signal?.aborted) { onAbort(); return }
    signal?.addEventListener('abort', onAbort, { once: true })
    inFlight.add(entry)
    if (sweeper === null) { sweeper = setInterval(sweep, SWEEP_MS); sweeper.unref() }
    const dispatcher = o.dispatcher ?? getGlobalDispatcher()
    try {
      dispatcher.dispatch({ origin: u.origin, path: u.pathname + u.search, method, headers, body, headersTimeout: o.timeoutMs, bodyTimeout: o.timeoutMs }, {
        onRequestStart (c) {
          controller = c
          if (done) c.abort(new NoAnswer('ended before it was sent'))
        },
        onResponseStart (_c, statusCode, h) {
          status = statusCode
          answerHeaders = flatten(h)
        },
        onResponseData (_c, chunk) {
          if (done) return
          size += chunk.length
          if (size > o.maxBytes) { end(new AnswerTooLarge(status, o.maxBytes)); return }
          chunks.push(chunk)
        },
        onResponseEnd () {
          const text = (chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size)).toString('utf8')
          let json: JsonAnswer['json'] = null
          if (text.length > 0) { try { json = JSON.parse(text) } catch { json = null } }
          end(null, { status, headers: answerHeaders, json, text })
        },
        onResponseError (_c, err) { end(new NoAnswer(err.message)) },
      })
    } catch (err) {
      end(new NoAnswer((err as Error).message))
    }
  })
}
