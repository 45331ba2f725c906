/**
 * The JSON client of provider API calls (docs/architecture.md "Providers and media"): one
 * request over the service's HTTP/1.1 client (src/net/h1-client.ts) with a whole-request
 * timeout and the caller's signal, the answer read up to a size cap, its headers flattened and
 * its body parsed when it is JSON. Two errors, one per failure: NoAnswer (no complete answer:
 * network error, reset, timeout, abort) and AnswerTooLarge. What a status means is the caller's
 * business (src/providers/http.ts).
 */
import { buildConnector } from 'undici'
import { Client, Exchange, headerRecord, requestWire } from './h1-client.js'
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
  /** The client the request goes through (default: this thread's provider client, `providerClient`). */
  client?: Client
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

/** Connect timeout of provider API sockets, ms (a request's own timeout bounds it too). */
const CONNECT_TIMEOUT_MS = 10_000
/**
 * Sockets per provider origin. No request is written ahead on a socket: a provider submit may
 * not be sent twice, and a request queued behind another on a socket that closes could have been
 * read already.
 */
export const PROVIDER_CONNECTIONS = 64
let shared: Client | null = null

/** This thread's client of provider API calls (operator-configured base URLs: no address guard, docs/architecture.md "Address policy"). */
export function providerClient (): Client {
  return (shared ??= new Client(buildConnector({ timeout: CONNECT_TIMEOUT_MS }), { maxConnections: PROVIDER_CONNECTIONS }))
}

/** One provider call: its answer collected up to the cap, then parsed. */
class JsonExchange extends Exchange {
  private readonly chunks: Buffer[] = []
  private size = 0
  private head = ''
  private signal: AbortSignal | undefined = undefined

  constructor (
    wire: string, deadline: number, resendable: boolean, private readonly client: Client,
    private readonly o: JsonRequest, private readonly resolve: (a: JsonAnswer) => void, private readonly reject: (e: Error) => void,
  ) { super(wire, deadline, resendable) }

  /** Ends it when `signal` aborts (before it is sent, or while it waits for its answer). */
  watch (signal: AbortSignal | undefined): void {
    if (signal === undefined) return
    this.signal = signal
    signal.addEventListener('abort', this.onAbort, { once: true })
  }

  private readonly onAbort = (): void => { this.client.cancel(this, new NoAnswer('aborted')) }

  headers (status: number, head: string): void {
    this.status = status
    this.head = head
  }

  body (buf: Buffer, at: number, n: number): void {
    this.size += n
    if (this.size > this.o.maxBytes) { this.client.cancel(this, new AnswerTooLarge(this.status, this.o.maxBytes)); return }
    this.chunks.push(at === 0 && n === buf.length ? buf : buf.subarray(at, at + n))
  }

  finish (): void {
    if (this.ended) return
    const c = this.chunks
    const text = c.length === 0 ? '' : (c.length === 1 ? c[0] : Buffer.concat(c, this.size)).toString('utf8')
    let json: JsonAnswer['json'] = null
    if (text.length > 0) { try { json = JSON.parse(text) } catch { json = null } }
    this.settle()
    this.resolve({ status: this.status, headers: headerRecord(this.head), json, text })
  }

  cut (cause: Error): void { this.fail(new NoAnswer(`the answer was cut short: ${cause.message}`)) }

  fail (cause: unknown): void {
    if (this.ended) return
    this.settle()
    if (cause instanceof AnswerTooLarge || cause instanceof NoAnswer) { this.reject(cause); return }
    const e = cause as Error
    this.reject(new NoAnswer(e?.name === 'DeadlineExceeded' ? `no answer within ${this.o.timeoutMs} ms` : (e?.message ?? String(cause))))
  }

  private settle (): void {
    this.ended = true
    this.signal?.removeEventListener('abort', this.onAbort)
  }
}

/**
 * One request; resolves with any HTTP status. `accept: application/json` unless the caller's
 * headers say otherwise. The whole-request timeout (waiting for a socket included) is a deadline
 * the client's one sweep checks for every request in flight, not a timer and a signal per
 * request (docs/decisions.md "Provider calls without a timer each"). Only a GET is sent again
 * when a kept-alive socket closed before any byte of its answer (src/net/h1-client.ts).
 */
export function requestJson (method: 'GET' | 'POST' | 'PUT', url: string, o: JsonRequest): Promise<JsonAnswer> {
  return new Promise<JsonAnswer>((resolve, reject) => {
    let u: URL
    try { u = new URL(url) } catch (err) { reject(new NoAnswer((err as Error).message)); return }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') { reject(new NoAnswer(`unsupported scheme ${u.protocol}`)); return }
    if (o.signal?.aborted) { reject(new NoAnswer('aborted')); return }
    const headers: Record<string, string> = { accept: 'application/json', ...o.headers }
    let body: string | undefined
    if (o.json !== undefined) {
      body = JSON.stringify(o.json)
      headers['content-type'] = 'application/json'
    }
    const wire = requestWire(method, u.pathname + u.search, u.host, headers, body)
    if (wire === null) { reject(new NoAnswer('a request header holds a line break')); return }
    const client = o.client ?? providerClient()
    const x = new JsonExchange(wire, performance.now() + o.timeoutMs, method === 'GET', client, o, resolve, reject)
    x.watch(o.signal)
    client.send(u.origin, x)
  })
}
