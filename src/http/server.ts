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
import { HEADER_NAMES, headerBlock, IdDigits, REQUEST_ID_HEADER } from './fast-headers.js'

/** Retry-After (seconds) on every 500 and 503 without a more specific one. */
const RETRY_AFTER_5XX_S = 1
const BODY_METHODS = new Set(['POST', 'PATCH', 'PUT'])
const REQUEST_ID_RE = /^[A-Za-z0-9._-]{1,128}$/
let idCounter = 0
const noop = (): void => {}

const { apiKey: H_API_KEY, authorization: H_AUTHORIZATION, requestId: H_REQUEST_ID, accept: H_ACCEPT, ifNoneMatch: H_IF_NONE_MATCH } = HEADER_NAMES

/**
 * Header lines written with one writeHeader call: uWS writes `key: value\r\n` as
 * given, so a value carrying `\r\n`-joined further lines is a precomputed block of headers in
 * one native call. Only ever built from constants and our own numbers, never from input.
 */
function block (headers: Record<string, string>): string {
  return Object.entries(headers).map(([k, v]) => `${k}: ${v}`).join('\r\n')
}

/** The precomputed answer of a `constant` route in one format. */
interface ConstantAnswer {
  payload: Buffer
  /** Every header after X-Request-Id, as the value of one Access-Control-Allow-Origin header line. */
  headers: string
  etag: string
}

interface Compiled {
  route: Route
  paramNames: string[]
  body?: ValidateFunction
  query?: ValidateFunction
  /** Metering endpoint ids of (method, path) and (HEAD, path). */
  ep: number
  epHead: number
  /** Interned (method, path prefix) of a route metered by URL through `meterTail`, else -1. */
  epUrl: number
  urlPrefix: string
  constant?: { json: ConstantAnswer; toon: ConstantAnswer }
  /** The 200 counters of the fast paths (GET, HEAD), taken from the metrics on first use. */
  okGet?: RequestCell
  okHead?: RequestCell
}

const ACAO_JSON = `*\r\nContent-Type: ${CONTENT_TYPE.json}`
const ACAO_TOON = `*\r\nContent-Type: ${CONTENT_TYPE.toon}\r\nX-TOON-Dict: none`
/** The constant end of a fast read's header block (src/http/fast-headers.ts), per format. */
const TAIL_JSON = Buffer.from(`\r\nAccess-Control-Allow-Origin: ${ACAO_JSON}\r\nX-Content-Type-Options: nosniff`)
const TAIL_TOON = Buffer.from(`\r\nAccess-Control-Allow-Origin: ${ACAO_TOON}\r\nX-Content-Type-Options: nosniff`)

/** Per-request state kept by the pipeline; `aborted` is set by uWS's onAborted. */
interface Exchange {
  res: HttpResponse
  aborted: boolean
  format: Format
  requestId: string
  started: number
  /** Counter of a generated request id; NaN when the client gave its own. */
  reqNum: number
  /** The route, when one matched (metering interns its endpoint). */
  c: Compiled | null
  caller: Caller | null
  rate: { limit: number; remaining: number } | null
  abortHooks: Array<() => void> | null
  /** A raw handler started writing: errors can no longer be sent as an envelope. */
  wrote: boolean
  /** A path parameter that is not valid percent-encoding: answered 400 INVALID_PARAM after authentication. */
  paramError: ApiError | null
  /** Route pattern for metrics ('unmatched' for the 404 catch-all). */
  route: string
  /** The request body's reader, on POST/PATCH/PUT routes. */
  body: RequestBody | null
  /** The answer was written (or is waiting for the body to be read): nothing may write again. */
  answered: boolean
}

/**
 * The uWebSockets.js front end (docs/architecture.md "Threads"): one App on the main thread, routes from
 * src/http/routes/*. uWS rules kept here: onAborted is registered before any await, the
 * HttpRequest is copied before the first await, and every write after an await is corked.
 */
export class HttpServer {
  readonly app: TemplatedApp
  private listenSocket: uWS.us_listen_socket | null = null
  private inFlight = 0
  private drainWaiters: Array<() => void> = []
  private closing = false
  private readonly ids: IdDigits

  constructor (private readonly services: Services, routes: Route[]) {
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
      const ex = this.begin(res, req)
      const method = req.getCaseSensitiveMethod ? req.getCaseSensitiveMethod() : req.getMethod().toUpperCase()
      const url = req.getUrl()
      this.fail(ex, new ApiError('NOT_FOUND', `No route for ${method} ${url}`), method, url)
    })
  }

  private register (route: Route): void {
    const endpoints = this.services.metering.endpoints
    const c: Compiled = {
      route,
      paramNames: (route.path.match(/:[A-Za-z_]+/g) ?? []).map(p => p.slice(1)),
      body: route.schema?.body && !route.rawBody && !route.manualValidation ? compileBody(route.schema.body) : undefined,
      query: route.schema?.query ? compileQuery(route.schema.query) : undefined,
      ep: endpoints.id(route.method, route.path),
      epHead: endpoints.id('HEAD', route.path),
      epUrl: -1,
      urlPrefix: '',
      // Set here, filled on first use: every compiled route keeps one hidden class.
      constant: undefined,
      okGet: undefined,
      okHead: undefined,
    }
    const last = c.paramNames.length === 1 ? `:${c.paramNames[0]}` : ''
    if (route.meterTail !== undefined && last !== '' && route.path.endsWith(last)) {
      c.urlPrefix = route.path.slice(0, -last.length)
      c.epUrl = endpoints.id(route.method, c.urlPrefix, true)
    }
    if (route.constant !== undefined && route.method === 'GET' && route.auth === 'public') c.constant = { json: this.precompute(route.constant, 'json'), toon: this.precompute(route.constant, 'toon') }
    let handler = (res: HttpResponse, req: HttpRequest) => this.handle(c, res, req, false)
    let headHandler = (res: HttpResponse, req: HttpRequest) => this.handle(c, res, req, true)
    if (c.constant !== undefined) {
      handler = (res, req) => this.constantAnswer(c, res, req, false)
      headHandler = (res, req) => this.constantAnswer(c, res, req, true)
    } else if (route.fast !== undefined && route.method === 'GET' && route.auth === 'key') {
      handler = (res, req) => this.fastRead(c, res, req, false)
      headHandler = (res, req) => this.fastRead(c, res, req, true)
    }
    switch (route.method) {
      case 'GET':
        this.app.get(route.path, handler)
        // HEAD answers every GET route's headers without the body (raw routes opt in).
        if (!route.rawBody || route.head) this.app.head(route.path, headHandler)
        break
      case 'POST': this.app.post(route.path, handler); break
      case 'PATCH': this.app.patch(route.path, handler); break
      case 'PUT': this.app.put(route.path, handler); break
      case 'DELETE': this.app.del(route.path, handler); break
    }
  }

  /** The serialised body and header block of a constant reply (the ETag carries the format, as in send()). */
  private precompute (reply: Reply, format: Format): ConstantAnswer {
    const etag = reply.etag === undefined ? '' : format === 'json' ? reply.etag : reply.etag.replace(/"$/, `-${format}"`)
    const h: Record<string, string> = { ...reply.headers }
    if (etag !== '') { h.ETag = etag; h.Vary = 'Accept' }
    h['Content-Type'] = CONTENT_TYPE[format]
    if (format === 'toon') h['X-TOON-Dict'] = 'none'
    h['X-Content-Type-Options'] = 'nosniff'
    return { payload: serialize(reply.body, format, true), headers: `*\r\n${block(h)}`, etag }
  }

  /**
   * GET/HEAD of a `constant` route (the catalogue), synchronously inside uWS's handler (which
   * is corked): two header writes, one end. Conditional requests and shutdown take the full path.
   */
  private constantAnswer (c: Compiled, res: HttpResponse, req: HttpRequest, head: boolean): void {
    if (this.closing || req.getHeader(H_IF_NONE_MATCH) !== '') { this.handle(c, res, req, head); return }
    const started = performance.now()
    const given = req.getHeader(H_REQUEST_ID)
    const a = req.getHeader(H_ACCEPT).includes('application/toon') ? c.constant!.toon : c.constant!.json
    let reqNum = NaN
    let requestId: string
    if (given !== '' && REQUEST_ID_RE.test(given)) requestId = given
    else { reqNum = ++idCounter; requestId = `req_${this.services.metering.reqPrefix}${reqNum.toString(36)}` }
    res.writeHeader('X-Request-Id', requestId)
    res.writeHeader('Access-Control-Allow-Origin', a.headers)
    // uWS counts a HEAD answer (a Content-Length and no body) as not yet complete: it needs an abort handler.
    if (head) { res.onAborted(noop); res.endWithoutBody(a.payload.length) }
    else res.end(a.payload)
    this.meterFast(c, head, started, Date.now(), NaN, NaN, reqNum, Number.isNaN(reqNum) ? requestId : null, req, false, null)
  }

  /**
   * GET/HEAD of an authenticated read with a `fast` handler (GET /v1/jobs/{id}): key and
   * account from the credential caches, the view from the job cache, the rate window counted,
   * and the answer written synchronously inside uWS's handler, with no context object, no
   * promise and one header write besides the status. Anything the caches cannot answer (a miss,
   * an error to report, a query string, Redis rate windows) goes to the full pipeline before
   * any side effect.
   */
  private fastRead (c: Compiled, res: HttpResponse, req: HttpRequest, head: boolean): void {
    const services = this.services
    if (this.closing || services.redisLimiter !== null || req.getQuery()) { this.handle(c, res, req, head); return }
    const nowMs = Date.now()
    const apiKey = req.getHeader(H_API_KEY)
    const caller = services.auth.fastCaller(c.route, apiKey, apiKey === '' ? req.getHeader(H_AUTHORIZATION) : '', nowMs)
    const hit = caller === undefined ? undefined : c.route.fast!(req, caller, services)
    if (hit === undefined) { this.handle(c, res, req, head); return }
    const started = performance.now()
    const given = req.getHeader(H_REQUEST_ID)
    const toon = req.getHeader(H_ACCEPT).includes('application/toon')
    const limit = services.config.tierLimits[caller!.tier].rpm
    const remaining = services.limiter.take(caller!.bucket, limit, nowMs)
    const own = given !== '' && REQUEST_ID_RE.test(given)
    const reqNum = own ? NaN : ++idCounter
    if (remaining < 0) {
      // Refused: the ordinary error answer (rare, so the Exchange costs nothing that matters).
      const ex: Exchange = {
        route: c.route.path, res, aborted: false, format: toon ? 'toon' : 'json', requestId: own ? given : this.generatedId(reqNum), reqNum, c, started,
        caller: caller!, rate: { limit, remaining: 0 }, abortHooks: null, wrote: false, paramError: null, body: null, answered: false
      }
      const e = new ApiError('RATE_LIMIT_EXCEEDED', `Rate limit of ${limit} requests per minute exceeded; retry in ${-remaining} s`, { retry_after: -remaining })
      e.headers = { 'Retry-After': String(-remaining) }
      this.fail(ex, e, head ? 'HEAD' : c.route.method, c.route.path)
      return
    }
    // The answer's own bytes (made once per view; serialize() shares them with the full path).
    const payload = toon ? (hit.toon ??= serialize(hit.view, 'toon', true)) : (hit.json ??= serialize(hit.view, 'json', true))
    res.writeHeader(REQUEST_ID_HEADER, headerBlock(this.ids, reqNum, own ? given : null, limit, remaining, toon ? TAIL_TOON : TAIL_JSON))
    if (head) { res.onAborted(noop); res.endWithoutBody(payload.length) }
    else res.end(payload)
    // Metered under the requested path, as the full pipeline does: a route's stored tail (the
    // job id the cache holds) keeps the row free of a per-request string.
    const tail = c.epUrl >= 0 && !head ? c.route.meterTail!(hit.view) : null
    this.meterFast(c, head, started, nowMs, caller!.accountId, caller!.keyId ?? NaN, reqNum, own ? given : null, req, tail === null, tail)
  }

  private generatedId (n: number): string { return `req_${this.services.metering.reqPrefix}${n.toString(36)}` }

  /**
   * Meters a 200 of the fast paths exactly as finish() would: a route with path parameters is
   * metered under the requested path (`byUrl`, or its interned prefix and `tail`), as the full
   * pipeline does for its answers.
   */
  private meterFast (
    c: Compiled, head: boolean, started: number, nowMs: number, account: number, key: number, reqNum: number, given: string | null,
    req: HttpRequest, byUrl: boolean, tail: string | null
  ): void {
    const now = performance.now()
    const { log, metering } = this.services
    const method = head ? 'HEAD' : c.route.method
    const url = tail !== null ? null : byUrl ? req.getUrl() : null
    if (log.isLevelEnabled('info')) {
      log.info({ reqId: given ?? this.generatedId(reqNum), method, url: url ?? (tail !== null ? c.urlPrefix + tail : c.route.path), status: 200, ms: Math.round((now - started) * 100) / 100 }, 'request')
    }
    const ep = tail !== null ? c.epUrl : url !== null ? -1 : head ? c.epHead : c.ep
    metering.push(nowMs, account, key, ep, method, tail ?? url, 200, 0, now - started, reqNum, given)
    // GET /metrics (src/metrics.ts): the route's own cell, no label lookups per request.
    const metrics = this.services.metrics
    const cell = head ? (c.okHead ??= metrics.requestCell(c.route.path, method, 200)) : (c.okGet ??= metrics.requestCell(c.route.path, method, 200))
    cell.n++
    cell.hist.observe((now - started) / 1000)
  }

  private begin (res: HttpResponse, req: HttpRequest, route = 'unmatched'): Exchange {
    const ex: Exchange = { route, res, aborted: false, format: 'json', requestId: '', reqNum: NaN, c: null, started: performance.now(), caller: null, rate: null, abortHooks: null, wrote: false, paramError: null, body: null, answered: false }
    res.onAborted(() => {
      ex.aborted = true
      ex.body?.settle(true)
      if (ex.abortHooks) for (const fn of ex.abortHooks.splice(0)) { try { fn() } catch {} }
    })
    const given = req.getHeader(H_REQUEST_ID)
    if (given !== '' && REQUEST_ID_RE.test(given)) ex.requestId = given
    else { ex.reqNum = ++idCounter; ex.requestId = `req_${this.services.metering.reqPrefix}${ex.reqNum.toString(36)}` }
    ex.format = negotiate(req.getHeader(H_ACCEPT) || undefined)
    return ex
  }

  private handle (c: Compiled, res: HttpResponse, req: HttpRequest, head: boolean): void {
    const ex = this.begin(res, req, c.route.path)
    ex.c = c
    // Copy everything from HttpRequest now: it is invalid after this function returns.
    const headers: Record<string, string> = {}
    req.forEach((k, v) => { headers[k] = v })
    const params: Record<string, string> = {}
    for (let i = 0; i < c.paramNames.length; i++) {
      const name = c.paramNames[i]
      const v = req.getParameter(i) ?? ''
      // decodeURIComponent throws on a malformed escape (`%zz`); thrown here, in the uWS
      // callback, it would take the whole process down.
      try { params[name] = decodeURIComponent(v) } catch {
        params[name] = v
        ex.paramError ??= new ApiError('INVALID_PARAM', `${name} is not valid percent-encoding`, { param: name })
      }
    }
    const path = req.getUrl()
    // Built on first use: most requests never read them (per-request cost on the hot path).
    const rawQuery = req.getQuery() ?? ''
    let query: URLSearchParams | undefined
    let ip: string | undefined

    if (this.closing) {
      this.fail(ex, new ApiError('SERVICE_UNAVAILABLE', 'Server is shutting down'), c.route.method, c.route.path)
      return
    }

    let body: Promise<Buffer> | undefined
    let bodyStream: Readable | undefined
    if (BODY_METHODS.has(c.route.method)) {
      const declared = headers['content-length'] === undefined ? NaN : Number(headers['content-length'])
      const lingers = headers.connection !== undefined && /\bclose\b/i.test(headers.connection)
      const rb = ex.body = new RequestBody(res, declared, lingers, (err) => this.bodyFault(ex, err))
      if (c.route.rawBody) bodyStream = rb.stream()
      else if (Number.isFinite(declared) && declared > JSON_BODY_LIMIT) {
        this.fail(ex, new ApiError('PAYLOAD_TOO_LARGE', `JSON body exceeds ${JSON_BODY_LIMIT} bytes`), c.route.method, c.route.path)
        return
      } else body = rb.read(JSON_BODY_LIMIT)
    }

    const ctx: RouteContext = {
      method: head ? 'HEAD' : c.route.method,
      path,
      params,
      get query () { return (query ??= new URLSearchParams(rawQuery)) },
      set query (v) { query = v },
      headers,
      body: undefined,
      caller: null,
      requestId: ex.requestId,
      get ip () {
        // uWS refuses access to a response that was answered or aborted: read while in flight.
        if (ip === undefined) { try { ip = Buffer.from(res.getRemoteAddressAsText()).toString() } catch { ip = '' } }
        return ip
      },
      services: this.services,
      meter: { credits: 0 },
      res: c.route.rawBody ? res : undefined,
      bodyStream,
      aborted: () => ex.aborted,
      onAborted: (fn) => { if (ex.aborted) fn(); else (ex.abortHooks ??= []).push(fn) },
      baseHeaders: () => { ex.wrote = true; return this.baseHeaders(ex) },
      route: c.route,
      rateLimit: (caller) => { ex.caller = caller; return this.rateLimit(ex, caller) },
    }
    this.inFlight++
    this.run(c, ex, ctx, body, rawQuery === '')
      .catch((err) => this.fail(ex, err, c.route.method, c.route.path, false, ctx))
      .finally(() => this.release())
  }

  private async run (c: Compiled, ex: Exchange, ctx: RouteContext, body: Promise<Buffer> | undefined, noQuery: boolean): Promise<void> {
    const route = c.route
    let raw: Buffer | undefined
    if (body !== undefined) raw = await body
    // While PostgreSQL is away a request waits a bounded time, then 503 (streaming
    // routes and /health answer for themselves).
    const guarded = route.rawBody !== true && route.path !== '/v1/health'
    const health = this.services.dbHealth
    if (route.auth !== 'public') {
      // A cached, valid API key is answered from memory (no hash, no promise; the same checks
      // as the fast reads); anything else, `?api_key=` included, goes through authenticate.
      const auth = this.services.auth
      const h = ctx.headers
      let caller = route.auth === 'key' && noQuery ? auth.fastCaller(route, h['x-api-key'] ?? '', h['x-api-key'] ? '' : h.authorization ?? '') : undefined
      if (caller === undefined) {
        const authenticating = auth.authenticate(route, h, ctx.query)
        caller = guarded ? await health.guard(authenticating) : await authenticating
      }
      ex.caller = caller
      ctx.caller = caller
      await this.rateLimit(ex, caller)
    }
    if (raw !== undefined) {
      const parsed = parseJson(raw, ctx.headers['content-type'])
      ctx.body = c.body ? check(c.body, parsed ?? {}, 'body') : parsed
    }
    if (c.query) {
      const q: Record<string, string> = {}
      for (const [k, v] of ctx.query) q[k] = v
      check(c.query, q, 'query')
      ctx.query = new URLSearchParams(Object.entries(q).map(([k, v]) => [k, String(v)]))
    }
    const reply = guarded ? await health.guard(Promise.resolve(route.handler(ctx))) : await route.handler(ctx)
    this.send(ex, reply, ctx)
  }

  /** The per-key sliding window (docs/api.md "Usage and limits"); X-RateLimit-* go on the answer either way. */
  private async rateLimit (ex: Exchange, caller: Caller): Promise<void> {
    if (caller.kind === 'admin') return
    const limit = this.services.config.tierLimits[caller.tier].rpm
    // With REDIS_URL the window is shared by every node; otherwise it lives in this process.
    const d = this.services.redisLimiter ? await this.services.redisLimiter.hit(caller.bucket, limit) : this.services.limiter.hit(caller.bucket, limit)
    ex.rate = { limit: d.limit, remaining: d.remaining }
    if (!d.allowed) {
      const e = new ApiError('RATE_LIMIT_EXCEEDED', `Rate limit of ${limit} requests per minute exceeded; retry in ${d.retryAfter} s`, { retry_after: d.retryAfter })
      e.headers = { 'Retry-After': String(d.retryAfter) }
      throw e
    }
  }

  private baseHeaders (ex: Exchange): Record<string, string> {
    const h: Record<string, string> = {
      'X-Request-Id': ex.requestId,
      'Access-Control-Allow-Origin': '*',
      // Every answer: a browser never guesses a type other than the one declared (docs/operations.md "Hostile input").
      'X-Content-Type-Options': 'nosniff',
    }
    if (ex.rate) {
      h['X-RateLimit-Limit'] = String(ex.rate.limit)
      h['X-RateLimit-Remaining'] = String(ex.rate.remaining)
    }
    return h
  }

  private send (ex: Exchange, reply: Reply, ctx: RouteContext): void {
    if (ex.answered) return // answered already (a body consumer failed): nothing more may be written
    if (ctx.res !== undefined && (reply.status === -1 || ex.wrote)) { // a raw handler wrote its own answer
      ex.answered = true
      ex.body?.settle(ex.aborted)
      this.finish(ex, reply.status === -1 || reply.status === undefined ? 200 : reply.status, ctx.method, ctx, ctx.path)
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
        this.deliver(ex, (close) => writeResponse(ex.res, 304, headers, undefined, close), () => this.finish(ex, 304, ctx.method, ctx, ctx.path))
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
    this.deliver(ex, (close) => writeResponse(ex.res, status, headers, out, close, ctx.method === 'HEAD'), () => this.finish(ex, status, ctx.method, ctx, ctx.path))
  }

  /**
   * Writes the answer (once: `answered`). When the request body is still arriving, the answer
   * waits until the rest has been read and dropped, bounded (lingering close, src/http/body.ts);
   * a body longer than the bound gets the answer at once and its connection closed. `done`
   * meters the request once the answer went out.
   */
  private deliver (ex: Exchange, write: (close: boolean) => void, done: () => void): void {
    ex.answered = true
    const b = ex.body
    if (ex.aborted || b === null || b.ended || !b.lingers || b.declared - b.received > LINGER_BYTES) {
      // At once: a keep-alive connection goes on reading the body after the answer; a
      // `Connection: close` one whose body is too long to wait for is closed.
      if (b !== null && !b.ended && !ex.aborted) b.discard()
      if (!ex.aborted) write(b !== null && !b.ended && b.lingers)
      b?.settle(ex.aborted)
      done()
      return
    }
    this.inFlight++
    void b.drop().then((ended) => {
      if (!ex.aborted) {
        try { write(!ended) } catch (err) { containEscaped(err, this.services.log, 'late answer') }
      }
      b.settle(ex.aborted)
      done()
    }).finally(() => this.release())
  }

  private release (): void {
    if (--this.inFlight === 0 && this.drainWaiters.length > 0) for (const w of this.drainWaiters.splice(0)) w()
  }

  /** A consumer of the request body threw inside uWS's data callback: contained and answered. */
  private bodyFault (ex: Exchange, err: unknown): void {
    containEscaped(err, this.services.log, 'request body consumer')
    if (!ex.answered && ex.c !== null) this.fail(ex, new ApiError('INTERNAL_ERROR'), ex.c.route.method, ex.c.route.path)
  }

  private fail (ex: Exchange, err: unknown, method: string, endpoint: string, closeConnection = false, ctx?: RouteContext): void {
    if (ex.answered) {
      // The answer went out already (or waits for the body): a later failure is only logged.
      if (!(err instanceof ApiError)) this.services.log.warn({ err, reqId: ex.requestId }, 'error after the answer')
      return
    }
    let e: ApiError
    if (err instanceof ApiError) e = err
    else if (isDbUnavailable(err)) {
      // PostgreSQL away is an expected event, answered 503 with Retry-After.
      this.services.log.warn({ err: String(err), reqId: ex.requestId }, 'database unavailable')
      e = dbUnavailable()
    } else {
      this.services.log.error({ err, reqId: ex.requestId }, 'unhandled error')
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
      this.finish(ex, e.status, method, ctx, endpoint)
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
    this.deliver(ex, (close) => writeResponse(ex.res, e.status, headers, payload, close || closeConnection, ctx?.method === 'HEAD'), () => this.finish(ex, e.status, method, ctx, endpoint))
  }

  private finish (ex: Exchange, status: number, method: string, ctx: RouteContext | undefined, endpoint: string): void {
    const now = performance.now()
    const ms = now - ex.started
    const { log, metering } = this.services
    if (log.isLevelEnabled('info')) log.info({ reqId: ex.requestId, method, url: ctx?.path ?? endpoint, status, ms: Math.round(ms * 100) / 100 }, 'request')
    // A route's own (method, path) is interned. An account's request is metered under the path
    // it asked for; one with no account (anonymous, admin, unmatched) under its route pattern or
    // `unmatched`, never its raw path (docs/operations.md "Usage metering").
    const c = ex.c
    // A public route that authenticates in its handler (SSE with a ticket or headers) sets ctx.caller.
    const caller = ex.caller ?? ctx?.caller ?? null
    const account = caller && caller.kind !== 'admin' ? caller.accountId : NaN
    const metered = Number.isNaN(account) ? ex.route : endpoint
    const ep = c !== null && metered === c.route.path ? (method === 'HEAD' ? c.epHead : method === c.route.method ? c.ep : -1) : -1
    metering.push(
      Date.now(),
      account,
      caller?.keyId ?? NaN,
      ep, method, metered, status, ctx?.meter.credits ?? 0, ms,
      ex.reqNum, Number.isNaN(ex.reqNum) ? ex.requestId : null,
    )
    this.services.metrics.request(ex.route, method, status, ms) // GET /metrics (src/metrics.ts)
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
    this.closing = true
    if (this.listenSocket) { uWS.us_listen_socket_close(this.listenSocket); this.listenSocket = null }
    ;(this.app as unknown as { close?: () => void }).close?.()
  }

  /** Stops accepting connections and waits (up to `timeoutMs`) for requests in flight. */
  async close (timeoutMs = 10_000): Promise<void> {
    this.closing = true
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
