/**
 * One GET of a file (provider results; docs/architecture.md "Providers and media") over the
 * service's HTTP/1.1 client (src/net/h1-client.ts): an answer whose declared length is at most
 * `bufferMax` is collected whole (no stream, no promise per chunk), a longer or undeclared one is
 * handed over as a Readable with backpressure (the socket is paused while its reader is
 * behind), and the body of any status but 200 is read into nothing.
 */
import { Readable } from 'node:stream'
import { Client, Exchange, headerRecord, requestWire } from './h1-client.js'

export interface GetOptions {
  /** The client the request goes through (src/net/agents.ts `downloadClient`: the address policy's). */
  client: Client
  /** From sending the request to its status and headers, ms (waiting for a socket included). */
  headersTimeout: number
  /** The longest wait for the next byte of the body, ms (not counted while a streamed body's reader is behind). */
  bodyTimeout: number
  /** A 200 answer declaring at most this many bytes is collected whole (`whole`). */
  bufferMax: number
  /** Called with the bytes so far (and the declared length) as each chunk of a collected body arrives: an error ends it. */
  check (size: number, declared: number): Error | null
}

export interface GetAnswer {
  status: number
  /** Header names lower-cased; repeated headers joined with ", ". */
  headers: Record<string, string>
  /** The declared Content-Length; NaN when there is none. */
  declared: number
  /** A collected body, resolved when it ends (200 within bufferMax). */
  whole: Promise<Buffer> | null
  /** A streamed body (200 over bufferMax or undeclared). */
  stream: Readable | null
  /** Ends the exchange: the body is not read further. */
  abort (err: Error): void
}

/** The body stopped arriving for bodyTimeout. */
export class BodyTimeout extends Error {
  readonly code = 'EBODYTIMEOUT'
  constructor (ms: number) { super(`no byte of the body for ${ms} ms`); this.name = 'BodyTimeout' }
}

/** The status and headers did not come within headersTimeout. */
export class HeadersTimeout extends Error {
  readonly code = 'EHEADERSTIMEOUT'
  constructor (ms: number) { super(`no answer within ${ms} ms`); this.name = 'HeadersTimeout' }
}

class GetExchange extends Exchange {
  private chunks: Buffer[] | null = null
  private size = 0
  private stream: Readable | null = null
  private wholeDone: { resolve (b: Buffer): void; reject (e: Error): void } | null = null
  private started = false
  private declared = NaN
  private paused = false

  constructor (wire: string, private readonly o: GetOptions, private readonly resolve: (a: GetAnswer) => void, private readonly reject: (e: Error) => void) {
    super(wire, performance.now() + o.headersTimeout)
  }

  headers (status: number, head: string): void {
    this.started = true
    this.status = status
    this.deadline = performance.now() + this.o.bodyTimeout
    const headers = headerRecord(head)
    const cl = headers['content-length']
    const declared = this.declared = cl === undefined ? NaN : Number(cl)
    let whole: Promise<Buffer> | null = null
    if (status === 200 && Number.isFinite(declared) && declared <= this.o.bufferMax) {
      this.chunks = []
      whole = new Promise<Buffer>((resolve, reject) => { this.wholeDone = { resolve, reject } })
      whole.catch(() => {})
    } else if (status === 200) {
      this.stream = new Readable({
        read: () => {
          if (!this.paused) return
          this.paused = false
          this.deadline = performance.now() + this.o.bodyTimeout
          this.conn?.resume()
        },
        destroy: (err, cb) => { if (!this.ended) this.o.client.cancel(this, err ?? new Error('download stopped')); cb(err) },
      })
      // A stream ended with an error nobody reads (the caller gave up on it) must not become an
      // uncaught exception; a reader still gets the error.
      this.stream.on('error', () => {})
    }
    this.resolve({ status, headers, declared, whole, stream: this.stream, abort: (err) => { if (!this.ended) this.o.client.cancel(this, err) } })
  }

  body (buf: Buffer, at: number, n: number): void {
    if (n === 0) return
    const piece = at === 0 && n === buf.length ? buf : buf.subarray(at, at + n)
    if (this.stream !== null) {
      if (!this.stream.push(piece) && !this.paused) {
        this.paused = true
        this.deadline = Infinity // the reader is behind, not the sender
        this.conn?.pause()
      } else if (!this.paused) this.deadline = performance.now() + this.o.bodyTimeout
      return
    }
    if (this.chunks === null) return
    this.size += n
    const err = this.o.check(this.size, this.declared)
    if (err !== null) { this.o.client.cancel(this, err); return }
    this.chunks.push(piece)
    this.deadline = performance.now() + this.o.bodyTimeout
  }

  finish (): void {
    if (this.ended) return
    this.ended = true
    if (this.paused) { this.paused = false; this.conn?.resume() } // the socket serves the next request
    if (this.stream !== null) { this.stream.push(null); return }
    if (this.chunks === null || this.wholeDone === null) return
    const c = this.chunks
    this.chunks = null
    this.wholeDone.resolve(c.length === 1 ? c[0] : Buffer.concat(c, this.size))
    this.wholeDone = null
  }

  cut (cause: Error): void { this.fail(new Error(`the download was cut short: ${cause.message}`)) }

  fail (cause: unknown): void {
    if (this.ended) return
    this.ended = true
    let err = cause instanceof Error ? cause : new Error(String(cause))
    if (err.name === 'DeadlineExceeded') err = this.started ? new BodyTimeout(this.o.bodyTimeout) : new HeadersTimeout(this.o.headersTimeout)
    if (!this.started) { this.started = true; this.reject(err); return }
    if (this.stream !== null) { if (!this.stream.destroyed) this.stream.destroy(err); return }
    this.chunks = null
    this.wholeDone?.reject(err)
    this.wholeDone = null
  }
}

/** Resolves when the answer's status and headers are in; network errors before that reject. */
export function get (url: URL, o: GetOptions): Promise<GetAnswer> {
  return new Promise<GetAnswer>((resolve, reject) => {
    if (url.protocol !== 'http:' && url.protocol !== 'https:') { reject(new Error(`unsupported scheme ${url.protocol}`)); return }
    const wire = requestWire('GET', url.pathname + url.search, url.host, {}, undefined)
    if (wire === null) { reject(new Error('a bad request line')); return }
    o.client.send(url.origin, new GetExchange(wire, o, resolve, reject))
  })
}
