/**
 * The JSON client of provider API calls (docs/architecture.md "Providers and media"): one
 * request over undici with a whole-request timeout combined with the caller's signal, the answer
 * read up to a size cap, its headers flattened and its body parsed when it is JSON. Two errors,
 * one per failure: NoAnswer (no complete answer: network error, reset, timeout, abort) and
 * AnswerTooLarge. What a status means is the caller's business (src/providers/http.ts).
 */
import { request, type Dispatcher } from 'undici'

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

/** One request; resolves with any HTTP status. `accept: application/json` unless the caller's headers say otherwise. */
export async function requestJson (method: 'GET' | 'POST' | 'PUT', url: string, o: JsonRequest): Promise<JsonAnswer> {
  const timeout = AbortSignal.timeout(o.timeoutMs)
  const signal = o.signal ? AbortSignal.any([o.signal, timeout]) : timeout
  const headers: Record<string, string> = { accept: 'application/json', ...o.headers }
  let body: string | undefined
  if (o.json !== undefined) {
    body = JSON.stringify(o.json)
    headers['content-type'] = 'application/json'
  }
  try {
    const res = await request(url, { method, headers, body, signal, dispatcher: o.dispatcher, headersTimeout: o.timeoutMs, bodyTimeout: o.timeoutMs })
    const chunks: Buffer[] = []
    let size = 0
    for await (const chunk of res.body) {
      size += chunk.length
      if (size > o.maxBytes) {
        res.body.destroy()
        throw new AnswerTooLarge(res.statusCode, o.maxBytes)
      }
      chunks.push(chunk)
    }
    const text = Buffer.concat(chunks).toString('utf8')
    let json: JsonAnswer['json'] = null
    if (text.length > 0) { try { json = JSON.parse(text) } catch { json = null } }
    const flat: Record<string, string> = {}
    for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) flat[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : String(v)
    return { status: res.statusCode, headers: flat, json, text }
  } catch (err) {
    if (err instanceof AnswerTooLarge) throw err
    throw new NoAnswer(timeout.aborted ? `no answer within ${o.timeoutMs} ms` : o.signal?.aborted ? 'aborted' : (err as Error).message)
  }
}
