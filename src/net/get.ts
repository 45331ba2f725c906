/**
 * One GET of a file (provider results; docs/architecture.md "Providers and media") over undici's
 * `dispatch`: an answer whose declared length is at most `bufferMax` is collected whole in the
 * handler (no stream, no promise per chunk: about half the client CPU of undici's `request` for
 * an image), a longer or undeclared one is handed over as a Readable with backpressure, and the
 * body of any status but 200 is read into nothing.
 */
import { Readable } from 'node:stream'
import type { Dispatcher } from 'undici'

export interface GetOptions {
  dispatcher: Dispatcher
  headersTimeout: number
  bodyTimeout: number
  /** A 200 answer declaring at most this many bytes is collected whole (`whole`). */
  bufferMax: number
  /** Called with the bytes so far (and the declared length) as each chunk of a collected body arrives: an error ends it. */
  check (size: number, declared: number): Error | null
}

export interface GetAnswer {
  status: number
  /** Header names lower-cased, as undici gives them. */
  headers: Record<string, string | string[] | undefined>
  /** The declared Content-Length; NaN when there is none. */
  declared: number
  /** A collected body, resolved when it ends (200 within bufferMax). */
  whole: Promise<Buffer> | null
  /** A streamed body (200 over bufferMax or undeclared). */
  stream: Readable | null
  /** Ends the exchange: the body is not read further. */
  abort (err: Error): void
}

class GetHandler implements Dispatcher.DispatchHandler {
  private chunks: Buffer[] | null = null
  private size = 0
  private stream: Readable | null = null
  private wholeDone: { resolve (b: Buffer): void; reject (e: Error): void } | null = null
  private started = false
  private declared = NaN

  constructor (private readonly o: GetOptions, private readonly resolve: (a: GetAnswer) => void, private readonly reject: (e: Error) => void) {}

  // undici calls it before the request is sent; the controller comes again with every later call.
  onRequestStart (): void {}

  onResponseStart (c: Dispatcher.DispatchController, status: number, headers: Record<string, string | string[] | undefined>): void {
    this.started = true
    const declared = this.declared = headers['content-length'] === undefined ? NaN : Number(headers['content-length'])
    let whole: Promise<Buffer> | null = null
    if (status === 200 && Number.isFinite(declared) && declared <= this.o.bufferMax) {
      this.chunks = []
      whole = new Promise<Buffer>((resolve, reject) => { this.wholeDone = { resolve, reject } })
      whole.catch(() => {})
    } else if (status === 200) {
      this.stream = new Readable({ read: () => c.resume(), destroy: (err, cb) => { if (!c.aborted) c.abort(err ?? new Error('download stopped')); cb(err) } })
      // A stream ended with an error nobody reads (the caller gave up on it) must not become an
      // uncaught exception; a reader still gets the error.
      this.stream.on('error', () => {})
    }
    this.resolve({ status, headers, declared, whole, stream: this.stream, abort: (err) => { if (!c.aborted) c.abort(err) } })
  }

  onResponseData (c: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.stream !== null) {
      if (!this.stream.push(chunk)) c.pause()
      return
    }
    if (this.chunks === null) return
    this.size += chunk.length
    const err = this.o.check(this.size, this.declared)
    if (err !== null) { this.fail(err); c.abort(err); return }
    this.chunks.push(chunk)
  }

  onResponseEnd (): void {
    if (this.stream !== null) { this.stream.push(null); return }
    if (this.chunks === null || this.wholeDone === null) return
    const c = this.chunks
    this.chunks = null
    this.wholeDone.resolve(c.length === 1 ? c[0] : Buffer.concat(c, this.size))
    this.wholeDone = null
  }

  onResponseError (_c: Dispatcher.DispatchController, err: Error): void { this.fail(err) }

  private fail (err: Error): void {
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
    try {
      o.dispatcher.dispatch({ origin: url.origin, path: url.pathname + url.search, method: 'GET', headersTimeout: o.headersTimeout, bodyTimeout: o.bodyTimeout },
        new GetHandler(o, resolve, reject))
    } catch (err) {
      reject(err as Error)
    }
  })
}
