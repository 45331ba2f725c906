/**
 * The service's own HTTP/1.1 client, over a connector (undici's `buildConnector`, or the
 * address-policy one of src/net/dns-guard.ts `guardedConnector`): webhook POSTs (`Post`, through
 * src/webhooks/delivery-send.ts), provider API calls (src/net/json-client.ts) and result
 * downloads (src/net/get.ts). A request is one string (head and body) written with one `write`;
 * an answer is parsed in place (status line, a few headers, a Content-Length, chunked or
 * until-close body) with no object per header and no stream, promise or timer per request.
 * Measured against undici's `dispatch` on the same receiver: 41 against 64 µs of client CPU
 * per webhook POST, 20 against 47 µs per provider JSON call (docs/decisions.md "Webhook HTTP
 * client", "Provider calls and downloads on the own HTTP/1.1 client").
 *
 * Per origin at most MAX_CONNECTIONS sockets (unless the Origin says otherwise), each with at most PIPELINING requests written
 * ahead (HTTP/1.1 pipelining, docs/decisions.md "Webhook HTTP client") once it has answered one
 * and stayed open; an idle socket is used first, then a new one, then the least loaded. A
 * request that got no byte of its answer when its socket closed is sent again on another
 * socket if it may be (`Exchange.resendable`: webhook POSTs, which the receiver dedupes on
 * X-Service-Delivery, docs/api.md "Webhooks", and GETs): always when it was queued behind
 * another request, once when it was first on a socket that had answered before (the receiver
 * closed it as we wrote). A request that may not be resent (a provider submit) fails instead.
 */
import type { Socket } from 'node:net'
import type { buildConnector } from 'undici'

/** At most this much of a failing receiver's answer is kept in last_error. */
export const SNIPPET_BYTES = 200
export const MAX_CONNECTIONS = 16
export const PIPELINING = 4
/** A socket idle this long is closed (below Node's default 5 s server keep-alive). */
export const IDLE_MS = 4000
const MAX_HEAD_BYTES = 64 * 1024
const MAX_LINE_BYTES = 8 * 1024

/** What one POST observed: a status (with a snippet of a non-2xx body) or an error. */
export interface SendResult {
  statusCode: number | null
  error: string | null
  /** The raw failure (describeError turns it into last_error). */
  cause?: unknown
}

/** The receiver's bytes are not an HTTP/1.x answer we can read. */
export class HttpProtocolError extends Error {
  readonly code = 'EHTTP_PROTOCOL'
  constructor (message: string) { super(message); this.name = 'HttpProtocolError' }
}

/** The socket closed before the answer began. */
export class ConnectionClosedError extends Error {
  readonly code = 'ECONNCLOSED'
  constructor () { super('the receiver closed the connection before answering'); this.name = 'ConnectionClosedError' }
}

const CRLF = Buffer.from('\r\n')
const CRLFCRLF = Buffer.from('\r\n\r\n')

const enum State { Head, Length, ChunkSize, ChunkData, ChunkEnd, Trailers, UntilClose }

/**
 * One request on an Origin: its bytes, its deadline and what its answer showed so far. A Conn
 * drives it: `headers` once the final status and headers are in, `body` per piece of the body,
 * then exactly one of `finish` (the answer is complete), `cut` (the socket closed after the
 * status, before the end of a delimited body) or `fail` (no answer).
 */
export abstract class Exchange {
  origin: Origin | null = null
  conn: Conn | null = null
  /** A byte of its answer arrived. */
  answered = false
  resent = false
  ended = false
  status = 0

  /** `resendable`: it may be written again on another socket when its own closed before any byte of its answer (see the header). */
  constructor (readonly wire: string, public deadline: number, readonly resendable = true) {}

  /** The final status and the head (status line and header lines, CRLF-separated); `location` read already. */
  abstract headers (status: number, head: string, location: string | null): void
  /** `n` bytes of the body at `at` in `buf` (a fresh buffer the exchange may keep a view of). */
  abstract body (buf: Buffer, at: number, n: number): void
  /** The answer is complete. */
  abstract finish (): void
  /** The socket closed after the status, before the end of a delimited body. */
  abstract cut (cause: Error): void
  /** No answer. */
  abstract fail (cause: unknown): void
}

/** One webhook POST: a status (with a snippet of a non-2xx body) or an error. */
export class Post extends Exchange {
  private location: string | null = null
  private chunks: Buffer[] | null = null
  private bytes = 0

  constructor (wire: string, deadline: number, private readonly done: (r: SendResult) => void) { super(wire, deadline) }

  headers (status: number, _head: string, location: string | null): void {
    this.status = status
    if (status >= 300) { this.chunks = []; this.location = location }
  }

  body (buf: Buffer, at: number, n: number): void {
    if (this.chunks !== null && this.bytes < SNIPPET_BYTES && n > 0) {
      this.chunks.push(Buffer.from(buf.subarray(at, at + Math.min(n, SNIPPET_BYTES - this.bytes))))
      this.bytes += n
    }
  }

  /** The answer is complete (or cut short after its status: still that status). */
  finish (): void {
    const code = this.status
    if (code >= 200 && code < 300) { this.end({ statusCode: code, error: null }); return }
    let error = `HTTP ${code}`
    if (code >= 300 && code < 400) error += `: redirect${this.location !== null ? ` to ${this.location.slice(0, 200)}` : ''} not followed`
    else {
      const snippet = this.chunks === null ? '' : Buffer.concat(this.chunks).toString('utf8').replace(/\s+/g, ' ').trim()
      if (snippet) error += `: ${snippet}`
    }
    this.end({ statusCode: code, error })
  }

  /** A delivery's verdict is its status: an answer cut short still counts as that status. */
  cut (): void { this.finish() }

  fail (cause: unknown): void { this.end({ statusCode: null, error: null, cause }) }

  private end (r: SendResult): void {
    if (this.ended) return
    this.ended = true
    this.done(r)
  }
}

/** One socket to an origin and the requests written to it, answered in order. */
export class Conn {
  readonly pending: Exchange[] = []
  socket: Socket | null = null
  closed = false
  /** destroy() was called: no more reads, writes or new requests. */
  private dead = false
  /**
   * It has completed an answer that kept it open: requests may be pipelined on it, and one
   * that got no answer when it closed may be resent. Until then it carries one request: a
   * receiver answering `Connection: close` may already have read and acted on requests
   * pipelined behind (Node's http server does), and resending those would deliver them twice.
   */
  reused = false
  idleSince = 0
  /** Closed when idle this long: IDLE_MS, or less when the receiver's Keep-Alive header says so. */
  idleMs = IDLE_MS
  private state = State.Head
  private partial: Buffer | null = null
  private remaining = 0
  private keepAlive = true
  private error: Error | null = null

  constructor (readonly origin: Origin) {}

  push (p: Exchange): void {
    p.conn = this
    this.pending.push(p)
    if (this.socket !== null) this.socket.write(p.wire)
  }

  attach (socket: Socket): void {
    this.socket = socket
    socket.setNoDelay(true)
    socket.on('data', this.onData)
    socket.on('error', (err) => { this.error ??= err })
    socket.on('close', this.onClose)
    for (const p of this.pending) socket.write(p.wire)
    this.idleSince = performance.now()
  }

  /** Stops reading the socket (a streamed body's reader is behind); `resume` reads on. */
  pause (): void { this.socket?.pause() }
  resume (): void { if (!this.dead) this.socket?.resume() }

  destroy (err?: Error): void {
    if (err !== undefined) this.error ??= err
    if (this.dead) return
    this.dead = true
    this.origin.remove(this)
    if (this.socket !== null) this.socket.destroy()
    else this.onClose()
  }

  private readonly onData = (chunk: Buffer): void => {
    if (this.dead) return
    let buf = chunk
    if (this.partial !== null) { buf = Buffer.concat([this.partial, chunk]); this.partial = null }
    let at = 0
    while (at < buf.length && !this.dead) {
      const post = this.pending[0]
      if (post === undefined) { this.destroy(new HttpProtocolError('an answer to no request')); return }
      post.answered = true
      switch (this.state) {
        case State.Head: {
          const end = buf.indexOf(CRLFCRLF, at)
          if (end < 0) { this.keep(buf, at, MAX_HEAD_BYTES); return }
          const head = buf.toString('latin1', at, end)
          at = end + 4
          const err = this.head(post, head)
          if (err !== null) { this.destroy(new HttpProtocolError(err)); return }
          break
        }
        case State.Length:
        case State.ChunkData: {
          const n = Math.min(this.remaining, buf.length - at)
          post.body(buf, at, n)
          if (this.dead) return // the exchange gave up on its answer (a size cap)
          at += n
          this.remaining -= n
          if (this.remaining === 0) {
            if (this.state === State.Length) this.complete(post)
            else this.state = State.ChunkEnd
          }
          break
        }
        case State.ChunkSize:
        case State.Trailers: {
          const eol = buf.indexOf(CRLF, at)
          if (eol < 0) { this.keep(buf, at, MAX_LINE_BYTES); return }
          const line = buf.toString('latin1', at, eol)
          at = eol + 2
          if (this.state === State.Trailers) { if (line === '') this.complete(post); break }
          const size = /^[0-9a-fA-F]{1,8}(?=[;\s]|$)/.exec(line)
          if (size === null) { this.destroy(new HttpProtocolError('a bad chunk size')); return }
          this.remaining = parseInt(size[0], 16)
          this.state = this.remaining === 0 ? State.Trailers : State.ChunkData
          break
        }
        case State.ChunkEnd: {
          if (buf.length - at < 2) { this.keep(buf, at, 2); return }
          if (buf[at] !== 13 || buf[at + 1] !== 10) { this.destroy(new HttpProtocolError('a chunk not ended by CRLF')); return }
          at += 2
          this.state = State.ChunkSize
          break
        }
        case State.UntilClose:
          post.body(buf, at, buf.length - at)
          at = buf.length
          break
      }
    }
  }

  /** Keeps an incomplete head or line for the next read (rare: a copy). */
  private keep (buf: Buffer, at: number, limit: number): void {
    if (buf.length - at > limit) { this.destroy(new HttpProtocolError('an answer line or head too long')); return }
    this.partial = Buffer.from(buf.subarray(at))
  }

  /** Reads a status line and headers; null when fine, else what is wrong. */
  private head (post: Exchange, head: string): string | null {
    if (!head.startsWith('HTTP/1.') || head.length < 12) return 'not an HTTP/1.x answer'
    const status = Number(head.slice(9, 12))
    if (!Number.isInteger(status) || status < 100 || (head.length > 12 && head.charCodeAt(12) !== 32 && head.charCodeAt(12) !== 13)) {
      return 'a bad status line'
    }
    let length = -1
    let chunked = false
    let connection = ''
    let location: string | null = null
    for (let i = head.indexOf('\r\n'); i >= 0;) {
      const next = head.indexOf('\r\n', i + 2)
      const line = head.slice(i + 2, next < 0 ? head.length : next)
      i = next
      const colon = line.indexOf(':')
      if (colon === 14 || colon === 17 || colon === 10 || colon === 8) {
        const name = line.slice(0, colon).toLowerCase()
        const value = line.slice(colon + 1).trim()
        if (name === 'content-length') {
          if (!/^\d{1,15}$/.test(value) || (length >= 0 && Number(value) !== length)) return 'a bad Content-Length'
          length = Number(value)
        } else if (name === 'transfer-encoding') chunked = /(?:^|,)\s*chunked\s*$/i.test(value)
        else if (name === 'connection') connection = value.toLowerCase()
        else if (name === 'keep-alive') {
          // `timeout=N`: the receiver closes an idle socket after N s; give it up a second before.
          const m = /timeout\s*=\s*(\d+)/i.exec(value)
          if (m !== null) this.idleMs = Math.min(IDLE_MS, Math.max(0, Number(m[1]) * 1000 - 1000))
        }
        else if (name === 'location') location = value
      }
    }
    if (status < 200) return status === 101 ? 'an unexpected protocol switch' : null // 1xx: the final answer follows
    post.headers(status, head, location)
    if (this.dead) return null // the exchange gave up on its answer
    this.keepAlive = head.charCodeAt(7) === 48 ? connection.includes('keep-alive') : !connection.includes('close')
    if (status === 204 || status === 304) this.complete(post)
    else if (chunked) this.state = State.ChunkSize
    else if (length === 0) this.complete(post)
    else if (length > 0) { this.remaining = length; this.state = State.Length } else { this.keepAlive = false; this.state = State.UntilClose }
    return null
  }

  private complete (post: Exchange): void {
    this.pending.shift()
    this.state = State.Head
    // Before the caller hears of it: its callback may send the next request at once, which
    // must not land on a socket the receiver is closing.
    if (!this.keepAlive) { this.origin.pipelining = 1; this.destroy() } else this.reused = true
    post.finish()
    if (this.dead) return
    if (this.pending.length === 0) this.idleSince = performance.now()
    this.origin.pump()
  }

  private readonly onClose = (): void => {
    if (this.closed) return
    this.closed = true
    this.dead = true
    this.origin.remove(this)
    const err = this.error ?? new ConnectionClosedError()
    const resend: Exchange[] = []
    for (let i = 0; i < this.pending.length; i++) {
      const p = this.pending[i]
      if (p.ended) continue
      p.conn = null
      if (p.status >= 200) {
        // A body that runs until close ends here; any other was cut short.
        if (i === 0 && this.state === State.UntilClose) p.finish()
        else p.cut(err)
      } else if (this.socket !== null && !p.answered && p.resendable && (i > 0 || (this.reused && !p.resent))) {
        // Behind another request: sent again whatever happened (the one ahead of it progressed).
        // At the head of a kept-alive socket: once (the receiver closed it as we wrote).
        if (i === 0) p.resent = true
        resend.push(p)
      } else p.fail(err)
    }
    this.pending.length = 0
    this.origin.requeue(resend)
  }
}

export type Connector = buildConnector.connector

/** The sockets and waiting requests of one origin. */
export class Origin {
  /** Requests written ahead per socket; 1 once the receiver has closed a socket after an answer. */
  pipelining = PIPELINING
  readonly conns: Conn[] = []
  readonly queue: Exchange[] = []
  private readonly target: { protocol: string; hostname: string; host: string; port: string }

  /** `maxConnections`: sockets this origin may open (MAX_CONNECTIONS unless said otherwise). */
  constructor (origin: string, private readonly connector: Connector, private readonly maxConnections = MAX_CONNECTIONS) {
    const u = new URL(origin)
    const hostname = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname
    this.target = { protocol: u.protocol, hostname, host: u.host, port: u.port || (u.protocol === 'https:' ? '443' : '80') }
  }

  send (p: Exchange): void {
    p.origin = this
    this.queue.push(p)
    this.pump()
  }

  /** A socket closed: its unanswered requests go first, and its place may take a new socket. */
  requeue (posts: Exchange[]): void {
    if (posts.length > 0) this.queue.unshift(...posts)
    this.pump()
  }

  pump (): void {
    while (this.queue.length > 0) {
      let best: Conn | null = null
      for (const c of this.conns) {
        const room = c.reused ? this.pipelining : 1
        if (c.pending.length < room && (best === null || c.pending.length < best.pending.length)) best = c
      }
      if ((best === null || best.pending.length > 0) && this.conns.length < this.maxConnections) best = this.open()
      if (best === null) return
      best.push(this.queue.shift() as Exchange)
    }
  }

  remove (c: Conn): void {
    const i = this.conns.indexOf(c)
    if (i >= 0) this.conns.splice(i, 1)
  }

  /** Cancels a request: out of the queue, or its socket closed (the requests behind it are resent). */
  cancel (p: Exchange, reason: Error): void {
    if (p.ended) return
    const conn = p.conn
    if (conn === null) {
      const i = this.queue.indexOf(p)
      if (i >= 0) this.queue.splice(i, 1)
      p.fail(reason)
      return
    }
    p.fail(reason)
    conn.destroy(reason)
  }

  /** Closes sockets idle longer than their idleMs. */
  sweep (now: number): void {
    for (const c of [...this.conns]) if (c.pending.length === 0 && c.socket !== null && now - c.idleSince > c.idleMs) c.destroy()
  }

  get idle (): boolean { return this.conns.length === 0 && this.queue.length === 0 }

  private open (): Conn {
    const c = new Conn(this)
    this.conns.push(c)
    const t = this.target
    this.connector({ protocol: t.protocol, hostname: t.hostname, host: t.host, port: t.port, servername: undefined }, (err, socket) => {
      // Never inside pump(): a refusal can be synchronous, and pump() is about to push onto c.
      if (err !== null || socket === null) { process.nextTick(() => c.destroy(err ?? new ConnectionClosedError())); return }
      if (c.closed) { socket.destroy(); return }
      c.attach(socket as Socket)
    })
    return c
  }
}

/** How often a Client checks its requests' deadlines and closes idle sockets (the granularity of their timeouts). */
export const SWEEP_MS = 100

/**
 * Requests to any origin over one connector (provider API calls, result downloads): the
 * origins' sockets, the requests in flight and their deadlines, checked by one interval timer
 * while anything is in flight or a socket is open, not a timer per request.
 */
export class Client {
  private readonly origins = new Map<string, Origin>()
  private readonly live = new Set<Exchange>()
  private sweeper: NodeJS.Timeout | null = null

  /** `maxConnections` and `pipelining` per origin (MAX_CONNECTIONS and 1: no request written ahead unless given). */
  constructor (private readonly connector: Connector, private readonly o: { maxConnections?: number; pipelining?: number } = {}) {}

  /** Requests not ended yet. */
  get inFlight (): number { return this.live.size }

  /** Sends `x` to `origin` (scheme, host and port: a URL's `origin`). */
  send (origin: string, x: Exchange): void {
    let o = this.origins.get(origin)
    if (o === undefined) {
      o = new Origin(origin, this.connector, this.o.maxConnections)
      o.pipelining = this.o.pipelining ?? 1
      this.origins.set(origin, o)
    }
    this.live.add(x)
    if (this.sweeper === null) { this.sweeper = setInterval(() => this.sweep(), SWEEP_MS); this.sweeper.unref() }
    o.send(x)
  }

  /** Ends `x` with `reason` (out of its queue, or its socket closed). */
  cancel (x: Exchange, reason: Error): void {
    this.live.delete(x)
    if (x.origin !== null) x.origin.cancel(x, reason)
    else x.fail(reason)
  }

  /** Ends every request with `reason` and closes every socket. */
  close (reason: Error): void {
    for (const x of [...this.live]) this.cancel(x, reason)
    for (const o of this.origins.values()) for (const c of [...o.conns]) c.destroy(reason)
    this.origins.clear()
  }

  private sweep (): void {
    const now = performance.now()
    for (const x of this.live) {
      if (x.ended) this.live.delete(x)
      else if (x.deadline <= now) this.cancel(x, new DeadlineExceeded())
    }
    for (const [k, o] of this.origins) {
      o.sweep(now)
      if (o.idle) this.origins.delete(k)
    }
    if (this.live.size === 0 && this.origins.size === 0 && this.sweeper !== null) { clearInterval(this.sweeper); this.sweeper = null }
  }
}

/** A Client request passed its deadline (the exchange says which: its own timeout message). */
export class DeadlineExceeded extends Error {
  readonly code = 'EDEADLINE'
  constructor () { super('deadline exceeded'); this.name = 'DeadlineExceeded' }
}

/** Header names and values a request may carry: no CR, LF or NUL (they would split the request). */
const UNSAFE_HEADER = /[\r\n\0]/

/**
 * The bytes of a request: `path` from a parsed URL (the WHATWG parser escapes what would break
 * the request line), `host` its host, `headers` a flat record. Null when a header name or value
 * could split the request.
 */
export function requestWire (method: string, path: string, host: string, headers: Record<string, string>, body: string | undefined): string | null {
  let wire = `${method} ${path} HTTP/1.1\r\nhost: ${host}\r\n`
  for (const k in headers) {
    const v = headers[k]
    if (UNSAFE_HEADER.test(k) || UNSAFE_HEADER.test(v) || k === '' || k.includes(':')) return null
    wire += `${k}: ${v}\r\n`
  }
  if (body !== undefined) wire += `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
  else wire += '\r\n'
  return wire
}

/** The header lines of a head (status line first) as a record: names lower-cased, repeated ones joined with ", ". */
export function headerRecord (head: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (let i = head.indexOf('\r\n'); i >= 0;) {
    const next = head.indexOf('\r\n', i + 2)
    const line = head.slice(i + 2, next < 0 ? head.length : next)
    i = next
    const colon = line.indexOf(':')
    if (colon <= 0) continue
    const name = line.slice(0, colon).trim().toLowerCase()
    const value = line.slice(colon + 1).trim()
    out[name] = out[name] === undefined ? value : `${out[name]}, ${value}`
  }
  return out
}
