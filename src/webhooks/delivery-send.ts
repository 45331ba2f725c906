/**
 * Sends webhook POSTs through the pool's own HTTP/1.1 client (src/net/h1-client.ts)
 * over the address-policy connector (src/net/dns-guard.ts). No promise, AbortSignal or timer per request: the caller's
 * one sweep (`Sender.sweep`) aborts requests past their deadline and closes idle sockets, and
 * `close` ends everything on stop.
 */
import { DELIVERY_TIMEOUT_MS } from './delivery.js'
import { deliveryTarget } from './signing.js'
import { Origin, Post, type Connector, type SendResult } from '../net/h1-client.js'

export { SNIPPET_BYTES, type SendResult } from '../net/h1-client.js'

/** A delivery URL checked and split once (deliveryTarget is a pure function of the URL). */
export type Destination = { origin: string; path: string; host: string; auth: string | null } | { error: string }

const timeoutError = (): Error => new DOMException('The operation was aborted due to timeout', 'TimeoutError')

/** Sends webhook POSTs; owns the origins' sockets, the requests in flight and their deadlines. */
export class Sender {
  private readonly live = new Set<Post>()
  private readonly origins = new Map<string, Origin>()
  private readonly dests = new Map<string, Destination>()

  /**
   * `sockets`: each origin's socket cap and requests written ahead per socket (h1-client's
   * MAX_CONNECTIONS and PIPELINING unless given).
   */
  constructor (
    private readonly connector: Connector,
    private readonly allowlist: readonly string[],
    private readonly timeoutMs = DELIVERY_TIMEOUT_MS,
    private readonly sockets: { max?: number; pipelining?: number } = {},
  ) {}

  /** Requests not answered yet. */
  get inFlight (): number { return this.live.size }

  /** deliveryTarget once per distinct URL (bounded cache; the connect-time guard stays). */
  destination (raw: string): Destination {
    let d = this.dests.get(raw)
    if (d !== undefined) return d
    const c = deliveryTarget(raw, this.allowlist)
    if ('error' in c) d = { error: c.error }
    else {
      // The WHATWG parser drops tabs and newlines and escapes spaces: the path cannot break the request line.
      d = { origin: c.url.origin, path: `${c.url.pathname}${c.url.search}`, host: c.url.host, auth: c.auth }
    }
    if (this.dests.size >= 10_000) this.dests.clear()
    this.dests.set(raw, d)
    return d
  }

  /** POSTs `body` with `headers` (a flat [name, value, ...] list) and calls `done` once. */
  send (dest: { origin: string; path: string; host: string }, headers: readonly string[], body: string, done: (r: SendResult) => void): void {
    let wire = `POST ${dest.path} HTTP/1.1\r\nhost: ${dest.host}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n`
    for (let i = 0; i + 1 < headers.length; i += 2) wire += `${headers[i]}: ${headers[i + 1]}\r\n`
    wire += `\r\n${body}`
    const p = new Post(wire, performance.now() + this.timeoutMs, (r) => { this.live.delete(p); done(r) })
    this.live.add(p)
    let o = this.origins.get(dest.origin)
    if (o === undefined) {
      o = new Origin(dest.origin, this.connector, this.sockets.max)
      if (this.sockets.pipelining !== undefined) o.pipelining = this.sockets.pipelining
      this.origins.set(dest.origin, o)
    }
    o.send(p)
  }

  /** Aborts requests past their deadline and closes idle sockets (called about every second by the loop). */
  sweep (): void {
    const now = performance.now()
    for (const p of this.live) if (p.deadline <= now) this.cancel(p, timeoutError())
    for (const [k, o] of this.origins) {
      o.sweep(now)
      if (o.idle) this.origins.delete(k)
    }
  }

  /** Ends every request in flight with `reason` and closes every socket (graceful stop). */
  close (reason: Error): void {
    for (const p of [...this.live]) this.cancel(p, reason)
    for (const o of this.origins.values()) for (const c of [...o.conns]) c.destroy(reason)
    this.origins.clear()
  }

  private cancel (p: Post, reason: Error): void {
    if (p.origin !== null) p.origin.cancel(p, reason)
    else p.fail(reason)
  }
}
