import uWS, { type HttpRequest, type HttpResponse, type TemplatedApp } from 'uWebSockets.js'
import type { Readable } from 'node:stream'
import type { ValidateFunction } from 'ajv'
import { ApiError } from '../errors.js'
import { dbUnavailable, isDbUnavailable } from '../db/connect.js'
import type { Services } from '../services.js'
import type { RequestCell } from '../metrics.js'
import { JSON_BODY_LIMIT, LINGER_BYTES, parseJson, RequestBody } from './body.js'
import { containEscaped } from '../escaped.js'
import { CONTENT_TYPE, negotiate, serialize, writeResponse, type Format } from './respond.js'
import type { Caller, Reply, Route, RouteContext } from './route.js'
import { check, compileBody, compileQuery } from './validate.js'
import { refuseQueryCredential, ScopeRefused } from './auth.js'
import { HEADER_NAMES, headerBlock, IdDigits, MAX_TAIL, REQUEST_ID_HEADER } from './fast-headers.js'

/**
 * Body framing or coding the service will not guess at (docs/operations.md "Hostile input"):
 * differing Content-Length headers (400); on JSON routes a Transfer-Encoding other than chunked
 * or a Content-Encoding other than identity (415: the body would be read as if plain).
 */
function framingFault (h: Record<string, string>, lengthsDiffer: boolean, raw: boolean): ApiError | null {
  if (lengthsDiffer) return new ApiError('VALIDATION_ERROR', 'The request has Content-Length headers that differ', { details: [{ path: '', message: 'must have one Content-Length' }] })
  if (raw) return null
  const te = h['transfer-encoding']
  if (te !== undefined && te.trim().toLowerCase() !== 'chunked') return new ApiError('UNSUPPORTED_MEDIA_TYPE', `Transfer-Encoding "${te.slice(0, 60)}" is not accepted: send the body as it is, or chunked`)
  const ce = h['content-encoding']
  if (ce !== undefined && ce.trim() !== '' && ce.trim().toLowerCase() !== 'identity') return new ApiError('UNSUPPORTED_MEDIA_TYPE', `Content-Encoding "${ce.slice(0, 60)}" is not accepted: send the body uncompressed`)
  return null
}

/** The path parameters of a route that has none (shared; nothing writes to them). */
const NO_PARAMS: Record<string, string> = Object.freeze({}) as Record<string, string>

/**
 * The header copy of HttpServer#handle: one function for every request rather than a closure
 * each (uWS calls it synchronously, once per header, inside req.forEach).
 */
let copying: Record<string, string> = NO_PARAMS
/** Two Content-Length values that differ: framing a proxy may read otherwise (smuggling). */
let lengthsDiffer = false
function copyHeader (k: string, v: string): void {
  if (k === 'content-length' && copying[k] !== undefined && copying[k] !== v) lengthsDiffer = true
  copying[k] = v
}

/** `%00` in a query string (U+0000 once decoded). */
const NUL_ESCAPE = /%00/

/** Retry-After (seconds) on every 500 and 503 without a more specific one. */
const RETRY_AFTER_5XX_S = 1
const BODY_METHODS = new Set(['POST', 'PATCH', 'PUT'])
const REQUEST_ID_RE = /^[A-Za-z0-9._-]{1,128}$/
/** Counter of generated request ids, one per process (ids carry the process's prefix). */
let idCounter = 0
const noop = (): void => {}

const { apiKey: H_API_KEY, authorization: H_AUTHORIZATION, requestId: H_REQUEST_ID, accept: H_ACCEPT, ifNoneMatch: H_IF_NONE_MATCH } = HEADER_NAMES

/** The header lines after X-Request-Id of an answer from memory, in one format: `\r\n`-led bytes. */
function tailBytes (headers: Record<string, string>): Buffer {
  return Buffer.from(Object.entries(headers).map(([k, v]) => `\r\n${k}: ${v}`).join(''))
}

/** The precomputed answer of a `constant` route in one format. */
interface ConstantAnswer {
  payload: Buffer
  /** Every header after X-Request-Id (src/http/fast-headers.ts). */
  tail: Buffer
}

/** The constant end of a cached read's header block, per format. */
const TAIL_JSON = tailBytes({ 'Access-Control-Allow-Origin': '*', 'Content-Type': CONTENT_TYPE.json, 'X-Content-Type-Options': 'nosniff' })
const TAIL_TOON = tailBytes({ 'Access-Control-Allow-Origin': '*', 'Content-Type': CONTENT_TYPE.toon, 'X-TOON-Dict': 'none', 'X-Content-Type-Options': 'nosniff' })

/**
 * A route compiled once, at registration, into the stages of the pipeline it runs
 * (docs/architecture.md "Request pipeline"). Every request goes through the same stages in the
 * same order; a route leaves out what it does not need, and a route that can be answered from
 * memory (`constant`, `cached`) runs its first stages synchronously inside uWS's handler.
 */
interface Compiled {
  route: Route
  paramNames: string[]
  /** Stage "validate": the compiled schemas, when the route has them. */
  body: ValidateFunction | undefined
  query: ValidateFunction | undefined
  /** Stage "read body": POST, PATCH and PUT routes. */
  readsBody: boolean
  /** Stage "authenticate": every route but `public` ones. */
  authenticates: boolean
  /**
   * A public route that does not authenticate in its handler: a credential in its query string
   * is refused before the handler runs (one that authenticates itself, SSE, refuses it there).
   */
  refusesQueryKeys: boolean
  /** Waits for PostgreSQL a bounded time, then 503, while it is away (not streams nor /v1/health). */
  guarded: boolean
  /** Stage "answer from memory", variant 1: the precomputed answer of a `constant` route, per format. */
  constant: { json: ConstantAnswer; toon: ConstantAnswer } | null
  /** Stage "answer from memory", variant 2: a cached read (`fast`), with the caller from the credential caches. */
  cached: boolean
  /** Metering endpoint ids of (method, path) and (HEAD, path). */
  ep: number
  epHead: number
  /** Interned (method, path prefix) and (HEAD, path prefix) of a route metered by URL through `meterTail`, else -1. */
  epUrl: number
  epUrlHead: number
  urlPrefix: string
  /** The 200 counters of the route (its method, HEAD), taken from the metrics on first use. */
  ok: RequestCell | undefined
  okHead: RequestCell | undefined
}

/**
 * Per-request state, one shape for every request. The synchronous stages run on the server's
 * one scratch Exchange, so a request answered from memory allocates none; a request that goes on
 * to the asynchronous stages gets its own copy (`detach`).
 */
class Exchange {
  res!: HttpResponse
  /** The route; null for a request that matched none. */
  c: Compiled | null = null
  /** As answered and metered: the route's method, HEAD on a GET route, the request's own when unmatched. */
  method = 'GET'
  /** A HEAD of a route: headers with the GET answer's Content-Length, no body. */
  head = false
  format: Format = 'json'
  /** Counter of a generated request id; NaN when the client gave its own, `given`. */
  reqNum = NaN
  given: string | null = null
  /** The generated id as text, made on first use (answers from memory write it as bytes). */
  idText: string | null = null
  started = 0
  /** The wall-clock time a synchronous stage already read (ms), else 0: the record reads the clock. */
  at = 0
  caller: Caller | null = null
  /** The caller's rate window after this request (X-RateLimit-*); limit -1: not counted. */
  limit = -1
  remaining = 0
  /** The requested path (the full pipeline, unmatched requests, HEAD of a cached read). */
  path: string | null = null
  /** A cached read's path parameter as a string its answer holds: metered as `urlPrefix + tail`. */
  tail: string | null = null
  ctx: RouteContext | null = null
  aborted = false
  abortHooks: Array<() => void> | null = null
  /** A raw handler started writing: errors can no longer be sent as an envelope. */
  wrote = false
  /** The request body's reader, on POST/PATCH/PUT routes. */
  body: RequestBody | null = null
  /** The answer was written (or is waiting for the body to be read): nothing may write again. */
  answered = false
}

/**
 * The context a handler gets (src/http/route.ts RouteContext), one object a request: the query
 * and the client's address made on first read (most requests never read them), the methods on
 * the prototype rather than closures made per request.
 */
class RequestContext implements RouteContext {
  readonly method: string
  body: unknown = undefined
  caller: Caller | null = null
  readonly requestId: string
  readonly services: Services
  readonly meter = { credits: 0 }
  readonly res: HttpResponse | undefined
  private q: URLSearchParams | undefined = undefined
  private addr: string | undefined = undefined

  constructor (
    private readonly server: HttpServer, private readonly ex: Exchange, readonly route: Route, readonly path: string,
    readonly params: Record<string, string>, readonly headers: Record<string, string>, readonly rawQuery: string,
    readonly bodyStream: Readable | undefined, readonly rawBytes: Promise<Buffer> | undefined
  ) {
    this.method = ex.method
    this.requestId = server.requestId(ex)
    this.services = server.services
    this.res = route.rawBody ? ex.res : undefined
  }

  get query (): URLSearchParams { return (this.q ??= new URLSearchParams(this.rawQuery)) }
  set query (v: URLSearchParams) { this.q = v }

  get ip (): string {
    // uWS refuses access to a response that was answered or aborted: read while in flight.
    if (this.addr === undefined) { try { this.addr = Buffer.from(this.ex.res.getRemoteAddressAsText()).toString() } catch { this.addr = '' } }
    return this.addr
  }

  aborted (): boolean { return this.ex.aborted }

  onAborted (fn: () => void): void {
    const ex = this.ex
    if (ex.aborted) fn(); else (ex.abortHooks ??= []).push(fn)
  }

  baseHeaders (): Record<string, string> {
    this.ex.wrote = true
    return this.server.baseHeaders(this.ex)
  }

  async rateLimit (caller: Caller): Promise<void> {
    this.ex.caller = caller
    await this.server.rate(this.ex, caller, Date.now())
  }
}

/**
 * The uWebSockets.js front end (docs/architecture.md "Threads", "Request pipeline"): one App per
 * front-end thread, routes from src/http/routes/*. One pipeline for every request: open
 * (request id, format), answer from memory (routes compiled with it), then the asynchronous
 * stages (shutdown, body, authenticate, rate window, validate, handler), write, record. uWS rules
 * kept here: onAborted is registered before any await, the HttpRequest is copied before the first
 * await, and every write after an await is corked.
 */
export class HttpServer {
  readonly app: TemplatedApp
  private listenSocket: uWS.us_listen_socket | null = null
  private inFlight = 0
  private drainWaiters: Array<() => void> = []
  private closing = false
  private readonly ids: IdDigits
  /** The Exchange of the synchronous stages (uWS calls handlers one at a time). */
  private readonly scratch = new Exchange()

  constructor (readonly services: Services, routes: Route[]) {
    this.app = uWS.App()
    this.ids = new IdDigits(`req_${services.metering.reqPrefix}`)
    for (const route of routes) this.register(route)
    this.app.options('/*', (res) => {
      res.writeStatus('204 No Content')
      res.writeHeader('Access-Control-Allow-Origin', '*')
      res.writeHeader('Access-Control-Allow-Methods', 'GET, POST, PATCH, DELETE, OPTIONS')
      res.writeHeader('Access-Control-Allow-Headers', 'Authorization, X-API-Key, Content-Type, Idempotency-Key, Last-Event-ID, Accept')
      res.writeHeader('Access-Control-Max-Age', '600')
      res.endWithoutBody(0)
    })
    this.app.any('/*', (res, req) => {
      const method = req.getCaseSensitiveMethod ? req.getCaseSensitiveMethod() : req.getMethod().toUpperCase()
      const ex = this.detach(this.open(null, method, res, req))
      ex.path = req.getUrl()
      this.fail(ex, new ApiError('NOT_FOUND', `No route for ${method} ${ex.path}`))
    })
  }

  /** Compiles `route` into its stages and registers its handlers (GET routes: HEAD too). */
  private register (route: Route): void {
    const endpoints = this.services.metering.endpoints
    const c: Compiled = {
      route,
      paramNames: (route.path.match(/:[A-Za-z_]+/g) ?? []).map(p => p.slice(1)),
      body: route.schema?.body && !route.rawBody && !route.manualValidation ? compileBody(route.schema.body) : undefined,
      query: route.schema?.query ? compileQuery(route.schema.query) : undefined,
      readsBody: BODY_METHODS.has(route.method),
      authenticates: route.auth !== 'public',
      refusesQueryKeys: route.auth === 'public' && route.errors?.includes('AUTH_REQUIRED') !== true,
      guarded: route.rawBody !== true && route.path !== '/v1/health',
      constant: null,
      cached: route.fast !== undefined && route.method === 'GET' && route.auth === 'key',
      ep: endpoints.id(route.method, route.path),
      epHead: endpoints.id('HEAD', route.path),
      epUrl: -1,
      epUrlHead: -1,
      urlPrefix: '',
      // Set here, filled on first use: every compiled route keeps one hidden class.
      ok: undefined,
      okHead: undefined,
    }
    const last = c.paramNames.length === 1 ? `:${c.paramNames[0]}` : ''
    if (c.cached && route.meterTail !== undefined && last !== '' && route.path.endsWith(last)) {
      c.urlPrefix = route.path.slice(0, -last.length)
      c.epUrl = endpoints.id(route.method, c.urlPrefix, true)
      c.epUrlHead = endpoints.id('HEAD', c.urlPrefix, true)
    }
    if (route.constant !== undefined && route.method === 'GET' && route.auth === 'public') {
      const json = this.precompute(route.constant, 'json')
      const toon = this.precompute(route.constant, 'toon')
      // A tail too long for the header block leaves the route to the asynchronous stages.
      if (json.tail.length <= MAX_TAIL && toon.tail.length <= MAX_TAIL) c.constant = { json, toon }
    }
    const handler = (res: HttpResponse, req: HttpRequest) => this.serve(c, route.method, res, req)
    switch (route.method) {
      case 'GET':
        this.app.get(route.path, handler)
        // HEAD answers every GET route's headers without the body (raw routes opt in).
        if (!route.rawBody || route.head) this.app.head(route.path, (res, req) => this.serve(c, 'HEAD', res, req))
        break
      case 'POST': this.app.post(route.path, handler); break
      case 'PATCH': this.app.patch(route.path, handler); break
      case 'PUT': this.app.put(route.path, handler); break
      case 'DELETE': this.app.del(route.path, handler); break
    }
  }

  /** The serialised body and header tail of a constant reply (the ETag carries the format, as in send()). */
  private precompute (reply: Reply, format: Format): ConstantAnswer {
    const etag = reply.etag === undefined ? '' : format === 'json' ? reply.etag : reply.etag.replace(/"$/, `-${format}"`)
    const h: Record<string, string> = { 'Access-Control-Allow-Origin': '*', ...reply.headers }
    if (etag !== '') { h.ETag = etag; h.Vary = 'Accept' }
    h['Content-Type'] = CONTENT_TYPE[format]
    if (format === 'toon') h['X-TOON-Dict'] = 'none'
    h['X-Content-Type-Options'] = 'nosniff'
    return { payload: serialize(reply.body, format, true), tail: tailBytes(h) }
  }

  /**
   * Every request of a route, as uWS hands it over: opened on the scratch Exchange, answered
   * from memory when the route was compiled with that stage and memory can answer, else handed
   * to the asynchronous stages on its own Exchange, before any side effect.
   */
  private serve (c: Compiled, method: string, res: HttpResponse, req: HttpRequest): void {
    const ex = this.open(c, method, res, req)
    if ((c.constant !== null || c.cached) && !this.closing && this.fromMemory(c, ex, req)) return
    this.handle(c, this.detach(ex), req)
  }

  /**
   * Stage "open", the one place a request id is made: the client's own X-Request-Id when it is
   * valid, else the next counter value (its text, `req_<prefix><counter base 36>`, is made only
   * when needed), then the answer's format (docs/api.md "TOON"). On the scratch Exchange.
   */
  private open (c: Compiled | null, method: string, res: HttpResponse, req: HttpRequest): Exchange {
    const ex = this.scratch
    ex.res = res
    ex.c = c
    ex.method = method
    ex.head = c !== null && method === 'HEAD'
    ex.started = performance.now()
    ex.at = 0
    const given = req.getHeader(H_REQUEST_ID)
    if (given !== '' && REQUEST_ID_RE.test(given)) { ex.given = given; ex.reqNum = NaN } else { ex.given = null; ex.reqNum = ++idCounter }
    ex.idText = null
    ex.format = negotiate(req.getHeader(H_ACCEPT))
    ex.caller = null
    ex.limit = -1
    ex.remaining = 0
    ex.path = null
    ex.tail = null
    return ex
  }

  /** The request's id as text (X-Request-Id of the full pipeline, ctx.requestId, log lines). */
  requestId (ex: Exchange): string {
    return ex.given ?? (ex.idText ??= this.ids.text(ex.reqNum))
  }

  /** The scratch Exchange's request on an Exchange of its own, watched for the client going away. */
  private detach (s: Exchange): Exchange {
    const ex = new Exchange()
    ex.res = s.res
    ex.c = s.c
    ex.method = s.method
    ex.head = s.head
    ex.format = s.format
    ex.reqNum = s.reqNum
    ex.given = s.given
    ex.idText = s.idText
    ex.started = s.started
    ex.caller = s.caller
    ex.limit = s.limit
    ex.remaining = s.remaining
    ex.path = s.path
    s.res.onAborted(() => {
      ex.aborted = true
      ex.body?.settle(true)
      if (ex.abortHooks) for (const fn of ex.abortHooks.splice(0)) { try { fn() } catch {} }
    })
    return ex
  }

  /**
   * Stage "answer from memory", synchronously inside uWS's handler (which is corked), with no
   * context object and no promise: a `constant` route's precomputed answer, or a cached read
   * (GET /v1/jobs/{id}: caller from the credential caches, view from the job cache, rate window
   * counted). False leaves the request to the asynchronous stages, with nothing done that they
   * would do again: If-None-Match, a query string, Redis rate windows, a cache miss, anything the
   * caches cannot answer.
   */
  private fromMemory (c: Compiled, ex: Exchange, req: HttpRequest): boolean {
    const k = c.constant
    if (k !== null) {
      // A query string (`?api_key=` among them) is the full pipeline's to answer.
      if (req.getHeader(H_IF_NONE_MATCH) !== '' || req.getQuery()) return false
      const a = ex.format === 'toon' ? k.toon : k.json
      this.writeFromMemory(ex, a.payload, a.tail)
      this.record(ex, 200, true)
      return true
    }
    const services = this.services
    if (services.redisLimiter !== null || req.getQuery()) return false
    const nowMs = Date.now()
    const apiKey = req.getHeader(H_API_KEY)
    const caller = services.auth.fastCaller(c.route, apiKey, apiKey === '' ? req.getHeader(H_AUTHORIZATION) : '', nowMs)
    if (caller === undefined) return false
    const hit = c.route.fast!(req, caller, services)
    if (hit === undefined) return false
    ex.caller = caller
    ex.at = nowMs // one clock read for the rate window and the metering row
    try {
      this.rate(ex, caller, nowMs)
    } catch (err) {
      this.fail(this.detach(ex), err) // refused: the ordinary error answer
      return true
    }
    // The answer's own bytes (made once per view; serialize() shares them with the full pipeline).
    const payload = ex.format === 'toon' ? (hit.toon ??= serialize(hit.view, 'toon', true)) : (hit.json ??= serialize(hit.view, 'json', true))
    this.writeFromMemory(ex, payload, ex.format === 'toon' ? TAIL_TOON : TAIL_JSON)
    // Metered under the requested path: a route's stored tail (the job id the cache holds)
    // keeps the row free of a per-request string.
    if (c.epUrl >= 0) ex.tail = c.route.meterTail!(hit.view)
    else ex.path = req.getUrl()
    this.record(ex, 200, true)
    return true
  }

  /** Stage "write" of an answer from memory: 200, one header write (src/http/fast-headers.ts) and the body. */
  private writeFromMemory (ex: Exchange, payload: Buffer, tail: Buffer): void {
    const res = ex.res
    res.writeHeader(REQUEST_ID_HEADER, headerBlock(this.ids, ex.reqNum, ex.given, ex.limit, ex.remaining, tail))
    // uWS counts a HEAD answer (a Content-Length and no body) as not yet complete: it needs an abort handler.
    if (ex.head) { res.onAborted(noop); res.endWithoutBody(payload.length) }
    else res.end(payload)
  }

  /**
   * The asynchronous stages of a route's request: the HttpRequest copied, then shutdown, body,
   * authenticate, rate window, validate, handler (run), each only where the route has it.
   */
  private handle (c: Compiled, ex: Exchange, req: HttpRequest): void {
    const res = ex.res
    // Copy everything from HttpRequest now: it is invalid after this function returns.
    const headers: Record<string, string> = copying = {}
    lengthsDiffer = false
    req.forEach(copyHeader)
    copying = NO_PARAMS
    const differ = lengthsDiffer
    const params: Record<string, string> = c.paramNames.length === 0 ? NO_PARAMS : {}
    for (let i = 0; i < c.paramNames.length; i++) {
      const name = c.paramNames[i]
      const v = req.getParameter(i) ?? ''
      // decodeURIComponent throws on a malformed escape (`%zz`); thrown here, in the uWS
      // callback, it would take the whole process down. Such a value is kept as sent: the
      // route's own check of the parameter answers it.
      // A decoded NUL (`%00`) is kept undecoded too: PostgreSQL text cannot hold U+0000.
      try { const d = decodeURIComponent(v); params[name] = d.includes('\u0000') ? v : d } catch { params[name] = v }
    }
    const path = ex.path = req.getUrl()
    const rawQuery = req.getQuery() ?? ''

    if (this.closing && c.route.servedWhileClosing !== true) {
      this.fail(ex, new ApiError('SERVICE_UNAVAILABLE', 'Server is shutting down'))
      return
    }
    // PostgreSQL text cannot hold U+0000: a query value carrying one is refused, not a 500.
    if (rawQuery !== '' && NUL_ESCAPE.test(rawQuery)) {
      this.fail(ex, new ApiError('VALIDATION_ERROR', 'Query values must not contain U+0000 (NUL)', { details: [{ path: 'query', message: 'must not contain U+0000' }] }))
      return
    }

    let body: Promise<Buffer> | undefined
    let bodyStream: Readable | undefined
    let rawBytes: Promise<Buffer> | undefined
    if (c.readsBody) {
      const declared = headers['content-length'] === undefined ? NaN : Number(headers['content-length'])
      const lingers = headers.connection !== undefined && /\bclose\b/i.test(headers.connection)
      const rb = ex.body = new RequestBody(res, declared, lingers, (err) => this.bodyFault(ex, err))
      const framing = framingFault(headers, differ, c.route.rawBody === true)
      if (framing !== null) {
        this.fail(ex, framing)
        return
      }
      if (c.route.rawBody && c.route.rawBodyLimit !== undefined) {
        rawBytes = rb.read(c.route.rawBodyLimit)
        // Read from now on (uWS drops data no reader takes); a body refused before the handler
        // awaits it is that handler's error, never an unhandled rejection.
        rawBytes.catch(() => {})
      } else if (c.route.rawBody) bodyStream = rb.stream()
      else if (Number.isFinite(declared) && declared > JSON_BODY_LIMIT) {
        this.fail(ex, new ApiError('PAYLOAD_TOO_LARGE', `JSON body exceeds ${JSON_BODY_LIMIT} bytes`))
        return
      } else body = rb.read(JSON_BODY_LIMIT)
    }

    const ctx = ex.ctx = new RequestContext(this, ex, c.route, path, params, headers, rawQuery, bodyStream, rawBytes)
    this.inFlight++
    void this.run(c, ex, ctx, body, rawQuery === '')
  }

  /** The asynchronous stages after the copy; any failure is the request's error answer (one promise a request). */
  private async run (c: Compiled, ex: Exchange, ctx: RouteContext, body: Promise<Buffer> | undefined, noQuery: boolean): Promise<void> {
    try {
      await this.stages(c, ex, ctx, body, noQuery)
    } catch (err) {
      this.fail(ex, err)
    } finally {
      this.release()
    }
  }

  private async stages (c: Compiled, ex: Exchange, ctx: RouteContext, body: Promise<Buffer> | undefined, noQuery: boolean): Promise<void> {
    const route = c.route
    let raw: Buffer | undefined
    if (body !== undefined) raw = await body
    // While PostgreSQL is away a request waits a bounded time, then 503 (streaming
    // routes and /health answer for themselves).
    const health = this.services.dbHealth
    if (c.refusesQueryKeys && !noQuery) refuseQueryCredential(ctx.query)
    if (c.authenticates) {
      // A cached, valid API key is answered from memory (no hash, no promise; the same checks
      // as the answers from memory); anything else, `?api_key=` included, goes through authenticate.
      const auth = this.services.auth
      const h = ctx.headers
      let caller = route.auth === 'key' && noQuery ? auth.fastCaller(route, h['x-api-key'] ?? '', h['x-api-key'] ? '' : h.authorization ?? '') : undefined
      if (caller === undefined) {
        const authenticating = auth.authenticate(route, h, ctx.query)
        try {
          caller = c.guarded ? await health.guard(authenticating) : await authenticating
        } catch (err) {
          // A known caller refused for its scope: counted in its window, its headers on the 403.
          if (err instanceof ScopeRefused) { ex.caller = err.caller; await this.rate(ex, err.caller, Date.now()) }
          throw err
        }
      }
      ex.caller = caller
      ctx.caller = caller
      const waiting = this.rate(ex, caller, Date.now())
      if (waiting !== undefined) await waiting
    }
    if (raw !== undefined) {
      const parsed = parseJson(raw, ctx.headers['content-type'])
      ctx.body = c.body ? check(c.body, parsed === undefined ? {} : parsed, 'body') : parsed
    }
    if (c.query) {
      const q: Record<string, string> = {}
      for (const [k, v] of ctx.query) q[k] = v
      check(c.query, q, 'query')
      ctx.query = new URLSearchParams(Object.entries(q).map(([k, v]) => [k, String(v)]))
    }
    const reply = c.guarded ? await health.guard(Promise.resolve(route.handler(ctx))) : await route.handler(ctx)
    this.send(ex, reply, ctx)
  }

  /**
   * Stage "rate window" (docs/api.md "Usage and limits"): counts the request in its caller's
   * sliding window and keeps the figures for X-RateLimit-*, which go on the answer either way;
   * throws RATE_LIMIT_EXCEEDED when the window is full. Synchronous with the in-memory (or
   * shared-memory) window; a promise with REDIS_URL, whose window every node shares.
   */
  rate (ex: Exchange, caller: Caller, nowMs: number): Promise<void> | undefined {
    if (caller.kind === 'admin') return undefined
    const limit = this.services.config.tierLimits[caller.tier].rpm
    const redis = this.services.redisLimiter
    if (redis !== null) {
      return redis.hit(caller.bucket, limit, nowMs).then((d) => {
        if (d.allowed) { ex.limit = d.limit; ex.remaining = d.remaining } else this.refuse(ex, d.limit, d.retryAfter)
      })
    }
    const remaining = this.services.limiter.take(caller.bucket, limit, nowMs)
    if (remaining < 0) this.refuse(ex, limit, -remaining)
    ex.limit = limit
    ex.remaining = remaining
    return undefined
  }

  private refuse (ex: Exchange, limit: number, retryAfter: number): never {
    ex.limit = limit
    ex.remaining = 0
    const e = new ApiError('RATE_LIMIT_EXCEEDED', `Rate limit of ${limit} requests per minute exceeded; retry in ${retryAfter} s`, { retry_after: retryAfter })
    e.headers = { 'Retry-After': String(retryAfter) }
    throw e
  }

  baseHeaders (ex: Exchange): Record<string, string> {
    const h: Record<string, string> = {
      'X-Request-Id': this.requestId(ex),
      'Access-Control-Allow-Origin': '*',
      // Every answer: a browser never guesses a type other than the one declared (docs/operations.md "Hostile input").
      'X-Content-Type-Options': 'nosniff',
    }
    if (ex.limit >= 0) {
      h['X-RateLimit-Limit'] = String(ex.limit)
      h['X-RateLimit-Remaining'] = String(ex.remaining)
    }
    return h
  }

  /** Stage "write" of a handler's reply (or, for a raw handler, the record of what it wrote). */
  private send (ex: Exchange, reply: Reply, ctx: RouteContext): void {
    if (ex.answered) return // answered already (a body consumer failed): nothing more may be written
    if (ctx.res !== undefined && (reply.status === -1 || ex.wrote)) { // a raw handler wrote its own answer
      ex.answered = true
      ex.body?.settle(ex.aborted)
      this.record(ex, reply.status === -1 || reply.status === undefined ? 200 : reply.status, true)
      return
    }
    const status = reply.status ?? 200
    const headers = this.baseHeaders(ex)
    if (reply.headers) Object.assign(headers, reply.headers)
    if (reply.etag) {
      // One representation per format: the tag carries the format so caches never mix them.
      // A raw body has one representation whatever Accept says.
      const perFormat = reply.raw === undefined
      headers.ETag = ex.format === 'json' || !perFormat ? reply.etag : reply.etag.replace(/"$/, `-${ex.format}"`)
      if (perFormat) headers.Vary = 'Accept'
      const inm = ctx.headers['if-none-match']
      if (inm !== undefined && inm.split(',').some(t => t.trim().replace(/^W\//, '') === headers.ETag)) {
        this.deliver(ex, (close) => writeResponse(ex.res, 304, headers, undefined, close), 304, true)
        return
      }
    }
    let payload: Buffer | undefined
    if (reply.raw !== undefined) {
      payload = reply.raw
      headers['Content-Type'] = reply.contentType ?? 'application/octet-stream'
    } else if (reply.body !== undefined) {
      payload = serialize(reply.body, ex.format, reply.etag !== undefined || reply.immutable === true)
      headers['Content-Type'] = CONTENT_TYPE[ex.format]
      if (ex.format === 'toon') headers['X-TOON-Dict'] = 'none'
    }
    const out = payload ?? (status === 204 ? undefined : Buffer.alloc(0))
    this.deliver(ex, (close) => writeResponse(ex.res, status, headers, out, close, ex.head), status, true)
  }

  /**
   * Writes the answer (once: `answered`). When the request body is still arriving, the answer
   * waits until the rest has been read and dropped, bounded (lingering close, src/http/body.ts);
   * a body longer than the bound gets the answer at once and its connection closed. The request
   * is recorded once the answer went out (`asked`: see record()).
   */
  private deliver (ex: Exchange, write: (close: boolean) => void, status: number, asked: boolean): void {
    ex.answered = true
    const b = ex.body
    if (ex.aborted || b === null || b.ended || !b.lingers || b.declared - b.received > LINGER_BYTES) {
      // At once: a keep-alive connection goes on reading the body after the answer; a
      // `Connection: close` one whose body is too long to wait for is closed.
      if (b !== null && !b.ended && !ex.aborted) b.discard()
      if (!ex.aborted) write(b !== null && !b.ended && b.lingers)
      b?.settle(ex.aborted)
      this.record(ex, status, asked)
      return
    }
    this.inFlight++
    void b.drop().then((ended) => {
      if (!ex.aborted) {
        try { write(!ended) } catch (err) { containEscaped(err, this.services.log, 'late answer') }
      }
      b.settle(ex.aborted)
      this.record(ex, status, asked)
    }).finally(() => this.release())
  }

  private release (): void {
    if (--this.inFlight === 0 && this.drainWaiters.length > 0) for (const w of this.drainWaiters.splice(0)) w()
  }

  /** A consumer of the request body threw inside uWS's data callback: contained and answered. */
  private bodyFault (ex: Exchange, err: unknown): void {
    containEscaped(err, this.services.log, 'request body consumer')
    if (!ex.answered && ex.c !== null) this.fail(ex, new ApiError('INTERNAL_ERROR'))
  }

  /** The error answer of any stage: the envelope in the negotiated format (docs/api.md "Errors"). */
  private fail (ex: Exchange, err: unknown, closeConnection = false): void {
    if (ex.answered) {
      // The answer went out already (or waits for the body): a later failure is only logged.
      if (!(err instanceof ApiError)) this.services.log.warn({ err, reqId: this.requestId(ex) }, 'error after the answer')
      return
    }
    let e: ApiError
    if (err instanceof ApiError) e = err
    else if (isDbUnavailable(err)) {
      // PostgreSQL away is an expected event, answered 503 with Retry-After.
      this.services.log.warn({ err: String(err), reqId: this.requestId(ex) }, 'database unavailable')
      e = dbUnavailable()
    } else {
      this.services.log.error({ err, reqId: this.requestId(ex) }, 'unhandled error')
      e = new ApiError('INTERNAL_ERROR')
    }
    if (ex.wrote) {
      // A raw handler failed after it started its answer: all that is left is to cut the connection.
      ex.answered = true
      if (!ex.aborted) {
        ex.aborted = true
        try { ex.res.cork(() => ex.res.close()) } catch {} // ended by the handler already
      }
      ex.body?.settle(true)
      this.record(ex, e.status, false)
      return
    }
    if (e.status === 429) this.services.metrics.refused(e.code) // GET /metrics
    const headers = this.baseHeaders(ex)
    if (e.headers) Object.assign(headers, e.headers)
    // docs/api.md "Errors": a 500 or 503 is safe to retry; say when (docs/decisions.md "Database outage").
    if ((e.status === 500 || e.status === 503) && headers['Retry-After'] === undefined) headers['Retry-After'] = String(RETRY_AFTER_5XX_S)
    headers['Content-Type'] = CONTENT_TYPE[ex.format]
    if (ex.format === 'toon') headers['X-TOON-Dict'] = 'none'
    const payload = serialize(e.toJSON(), ex.format, false)
    this.deliver(ex, (close) => writeResponse(ex.res, e.status, headers, payload, close || closeConnection, ex.head), e.status, false)
  }

  /**
   * Stage "record", the one place a request is logged, metered and counted, whichever stage
   * answered it. An account's answer (`asked`) is metered under the path it asked for (a cached
   * read's stored tail, or the requested path); an error, and any request with no account
   * (anonymous, admin, unmatched), under its route pattern or `unmatched`, never its raw path
   * (docs/operations.md "Usage metering"). A route's own (method, path) is interned.
   */
  private record (ex: Exchange, status: number, asked: boolean): void {
    const now = performance.now()
    const ms = now - ex.started
    const c = ex.c
    const ctx = ex.ctx
    // A public route that authenticates in its handler (SSE with a ticket or headers) sets ctx.caller.
    const caller = ex.caller ?? (ctx === null ? null : ctx.caller)
    const account = caller !== null && caller.kind !== 'admin' ? caller.accountId : NaN
    const route = c === null ? 'unmatched' : c.route.path
    let ep = -1
    let url: string | null = route
    if (c !== null) {
      if (!asked || Number.isNaN(account)) ep = ex.head ? c.epHead : c.ep
      else if (ex.tail !== null) { url = ex.tail; ep = ex.head ? c.epUrlHead : c.epUrl } else {
        url = ex.path ?? route
        if (url === route) ep = ex.head ? c.epHead : c.ep
      }
    }
    const { log, metering, metrics } = this.services
    if (log.isLevelEnabled('info')) {
      const path = ex.tail !== null ? c!.urlPrefix + ex.tail : ex.path ?? route
      log.info({ reqId: this.requestId(ex), method: ex.method, url: path, status, ms: Math.round(ms * 100) / 100 }, 'request')
    }
    const credits = ctx === null ? 0 : ctx.meter.credits
    metering.push(ex.at !== 0 ? ex.at : Date.now(), account, caller?.keyId ?? NaN, ep, ex.method, url, status, credits, ms, ex.reqNum, ex.given)
    // GET /metrics (src/metrics.ts): a route's 200s count in its own cells, with no label lookup.
    if (status === 200 && c !== null) {
      const cell = ex.head ? (c.okHead ??= metrics.requestCell(route, 'HEAD', 200)) : (c.ok ??= metrics.requestCell(route, ex.method, 200))
      cell.n++
      cell.hist.observe(ms / 1000)
    } else metrics.request(route, ex.method, status, ms)
  }

  listen (host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.app.listen(host, port, (sock) => {
        if (!sock) { reject(new Error(`could not listen on ${host}:${port}`)); return }
        this.listenSocket = sock
        resolve(uWS.us_socket_local_port(sock))
      })
    })
  }

  /**
   * Closes the listen socket and every connection at once (a front-end thread that failed, on
   * its way out: a worker thread may not exit with uWS sockets open, or Node aborts the process).
   */
  abort (): void {
    this.closing = this.services.closing = true
    if (this.listenSocket) { uWS.us_listen_socket_close(this.listenSocket); this.listenSocket = null }
    ;(this.app as unknown as { close?: () => void }).close?.()
  }

  /** Stops accepting connections and waits (up to `timeoutMs`) for requests in flight. */
  async close (timeoutMs = 10_000): Promise<void> {
    this.closing = this.services.closing = true
    if (this.listenSocket) { uWS.us_listen_socket_close(this.listenSocket); this.listenSocket = null }
    if (this.inFlight > 0) {
      await Promise.race([
        new Promise<void>(resolve => this.drainWaiters.push(resolve)),
        new Promise<void>(resolve => setTimeout(resolve, timeoutMs).unref()),
      ])
    }
    ;(this.app as unknown as { close?: () => void }).close?.()
  }
}
