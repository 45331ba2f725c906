/**
 * One webhook POST at the lowest cost undici offers (issue 13): `Dispatcher.dispatch` with a
 * bare handler instead of `request()`. No response stream, no promise, no AbortSignal and no
 * timer per request: the caller's one sweep (`Sender.sweep`) aborts requests past their
 * deadline, and `abortAll` ends them on stop. A 2xx body is discarded as it arrives; a failing
 * receiver's first SNIPPET_BYTES are kept for last_error.
 */
import type { Dispatcher } from 'undici'
import { basicAuthOf, checkDestination, DELIVERY_TIMEOUT_MS } from './delivery.js'

/** At most this much of a failing receiver's answer is kept in last_error. */
export const SNIPPET_BYTES = 200

/** What one POST observed: a status (with a snippet of a non-2xx body) or an error. */
export interface SendResult {
  statusCode: number | null
  error: string | null
  /** The raw failure (describeError turns it into last_error). */
  cause?: unknown
}

/** A delivery URL checked and split once (checkDestination is a pure function of the URL). */
export type Destination = { origin: string; path: string; auth: string | null } | { error: string }

const timeoutError = (): Error => new DOMException('The operation was aborted due to timeout', 'TimeoutError')

/** One request in flight: the undici handler (legacy callback form: no wrapping inside undici). */
class Post implements Dispatcher.DispatchHandler {
  private abortFn: ((err: Error) => void) | null = null
  private reason: Error | null = null
  private status = 0
  private location: string | null = null
  private chunks: Buffer[] | null = null
  private bytes = 0
  private ended = false

  constructor (
    readonly deadline: number,
    private readonly owner: Sender,
    private readonly done: (r: SendResult) => void,
  ) {}

  cancel (reason: Error): void {
    if (this.ended || this.reason !== null) return
    this.reason = reason
    if (this.abortFn !== null) this.abortFn(reason)
  }

  onConnect (abort: (err?: Error) => void): void {
    if (this.reason !== null) abort(this.reason)
    else this.abortFn = abort
  }

  onHeaders (statusCode: number, rawHeaders: Buffer[]): boolean {
    if (statusCode < 200) return true // 1xx: the final answer follows
    this.status = statusCode
    if (statusCode >= 300) {
      this.chunks = []
      if (statusCode < 400) {
        for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
          if (rawHeaders[i].length === 8 && rawHeaders[i].toString('latin1').toLowerCase() === 'location') {
            this.location = rawHeaders[i + 1].toString('latin1')
          }
        }
      }
    }
    return true
  }

  onData (chunk: Buffer): boolean {
    if (this.chunks !== null && this.bytes < SNIPPET_BYTES) {
      this.chunks.push(chunk)
      this.bytes += chunk.length
    }
    return true
  }

  onComplete (): void {
    const code = this.status
    if (code >= 200 && code < 300) { this.end({ statusCode: code, error: null }); return }
    let error = `HTTP ${code}`
    if (code >= 300 && code < 400) error += `: redirect${this.location !== null ? ` to ${this.location.slice(0, 200)}` : ''} not followed`
    else {
      const snippet = this.chunks === null
        ? ''
        : Buffer.concat(this.chunks).subarray(0, SNIPPET_BYTES).toString('utf8').replace(/\s+/g, ' ').trim()
      if (snippet) error += `: ${snippet}`
    }
    this.end({ statusCode: code, error })
  }

  onError (err: Error): void {
    // A body cut short after a status is still that status (as readSnippet did before).
    if (this.status >= 200 && this.reason === null) { this.onComplete(); return }
    this.end({ statusCode: null, error: null, cause: this.reason ?? err })
  }

  private end (r: SendResult): void {
    if (this.ended) return
    this.ended = true
    this.owner.live.delete(this)
    this.done(r)
  }
}

/** Sends webhook POSTs through one agent; owns the requests in flight and their deadlines. */
export class Sender {
  readonly live = new Set<Post>()
  private readonly dests = new Map<string, Destination>()

  constructor (
    private readonly agent: Dispatcher,
    private readonly allowlist: readonly string[],
    private readonly timeoutMs = DELIVERY_TIMEOUT_MS,
  ) {}

  /** checkDestination once per distinct URL (bounded cache; the connect-time guard stays). */
  destination (raw: string): Destination {
    let d = this.dests.get(raw)
    if (d !== undefined) return d
    const c = checkDestination(raw, this.allowlist)
    if ('error' in c) d = { error: c.error }
    else {
      c.url.hash = ''
      const auth = basicAuthOf(c.url)
      d = { origin: c.url.origin, path: `${c.url.pathname}${c.url.search}`, auth }
    }
    if (this.dests.size >= 10_000) this.dests.clear()
    this.dests.set(raw, d)
    return d
  }

  /**
   * POSTs `body` with `headers` (a flat [name, value, ...] list) and calls `done` once. The
   * request is idempotent for undici's purposes (the receiver dedupes on X-Service-Delivery,
   * SPEC.md 6.1), which lets undici pipeline it behind others on a kept-alive connection.
   */
  send (dest: { origin: string; path: string }, headers: string[], body: string, done: (r: SendResult) => void): void {
    const p = new Post(performance.now() + this.timeoutMs, this, done)
    this.live.add(p)
    try {
      this.agent.dispatch({ origin: dest.origin, path: dest.path, method: 'POST', headers, body, idempotent: true }, p)
    } catch (err) {
      p.onError(err as Error)
    }
  }

  /** Aborts requests past their deadline (called about every second by the loop). */
  sweep (): void {
    const now = performance.now()
    for (const p of this.live) if (p.deadline <= now) p.cancel(timeoutError())
  }

  /** Ends every request in flight with `reason` (graceful stop). */
  abortAll (reason: Error): void {
    for (const p of [...this.live]) p.cancel(reason)
  }
}
