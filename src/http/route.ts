import type { TSchema } from '@sinclair/typebox'
import type { HttpRequest, HttpResponse } from 'uWebSockets.js'
import type { Readable } from 'node:stream'
import type { Services } from '../services.js'

/** Who may call a route. `key` also admits a session JWT (the dashboard); `session` only a JWT. */
export type AuthMode = 'public' | 'key' | 'session' | 'admin'
export type Scope = 'generate' | 'read'
export type Tier = 'free' | 'pro' | 'enterprise' | 'session'

/** The authenticated caller, resolved by src/http/auth.ts before the handler runs. */
export interface Caller {
  kind: 'key' | 'session' | 'admin'
  accountId: number
  /** API key id (kind key), else null. */
  keyId: number | null
  tier: Tier
  scopes: readonly Scope[]
  /** Rate-limit bucket: `k<id>` per key, `u<id>` per session user. */
  bucket: string
}

/** What a handler sees. HttpRequest is never used after the first await; this is a plain copy. */
export interface RouteContext {
  method: string
  path: string
  params: Record<string, string>
  query: URLSearchParams
  /** The query string as it arrived, without `?` ('' for none). */
  readonly rawQuery: string
  /** Lower-cased header names. */
  headers: Record<string, string>
  body: unknown
  caller: Caller | null
  requestId: string
  ip: string
  services: Services
  /** Credits charged by this request, for metering. Handlers set it. */
  meter: { credits: number }
  /** The raw uWS response, only for `rawBody` / streaming routes (uploads, files, SSE). */
  res?: HttpResponse
  /** The request body as a stream, for `rawBody` POST/PATCH/PUT routes (uploads). */
  bodyStream?: Readable
  /**
   * The whole request body, for `rawBody` routes with a `rawBodyLimit` (provider callbacks):
   * read as it arrives, rejected with PAYLOAD_TOO_LARGE once it crosses the limit.
   */
  rawBytes?: Promise<Buffer>
  /** True once the client went away (uWS onAborted). Check it before every write after an await. */
  aborted: () => boolean
  /** Runs `fn` when the client goes away (streaming handlers free their resources here). */
  onAborted: (fn: () => void) => void
  /** The route being served. */
  route: Route
  /** Counts a request of `caller` in its rate window (routes that authenticate themselves); throws RATE_LIMIT_EXCEEDED. */
  rateLimit: (caller: Caller) => Promise<void>
  /** For raw handlers: the headers the front end adds to every response (X-Request-Id, rate limits, CORS). */
  baseHeaders: () => Record<string, string>
}

/** A handler answer. `body` objects returned repeatedly by identity are serialised once. */
export interface Reply {
  /** -1: the handler wrote the response itself (streams). */
  status?: number
  body?: unknown
  headers?: Record<string, string>
  /** Strong validator; the front end answers 304 when If-None-Match matches. */
  etag?: string
  /** `body` is never mutated (a cached job view): serialised once per format, by identity. */
  immutable?: boolean
  /** Bytes sent as they are (HTML, scripts, CSS) instead of serialising `body` as JSON/TOON; one representation whatever Accept says. */
  raw?: Buffer
  /** Content-Type of `raw` (default application/octet-stream). */
  contentType?: string
}

export interface RouteSchema {
  body?: TSchema
  query?: TSchema
  params?: TSchema
  /** Response schemas by status, for the OpenAPI description. */
  response?: Record<number, TSchema>
}

export interface Route {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE' | 'PUT'
  /** `/v1/auth/keys/:keyId` style. */
  path: string
  auth: AuthMode
  scope?: Scope
  schema?: RouteSchema
  summary: string
  tag: string
  /** The handler validates the body itself (schema.body is then only documentation). */
  manualValidation?: boolean
  /** Error codes this route can answer besides the generic ones (for OpenAPI). */
  errors?: string[]
  /**
   * Raw: the front end neither reads the body nor writes the answer. The handler gets `ctx.res`,
   * reads the body itself (uploads) and/or writes its own response (files, SSE), corking every
   * write after an await, then returns `{ status: -1 }` (or `{ status }` of what it wrote, for
   * metering: `{ status: -1 }` meters as 200). Throwing an ApiError before the first write still
   * gets the normal envelope.
   */
  rawBody?: boolean
  /** With `rawBody`: the body is read whole into `ctx.rawBytes`, up to this many bytes, instead of streamed. */
  rawBodyLimit?: number
  /** A raw GET route that also answers HEAD itself (ctx.method is 'HEAD'); plain GET routes get HEAD for free. */
  head?: boolean
  /** OpenAPI `content` of a raw body (multipart uploads). */
  rawBodySchema?: Record<string, unknown>
  /** OpenAPI `content` of answers that are not JSON described by schema.response (HTML, scripts, event streams), by status. */
  responseContent?: Record<number, Record<string, unknown>>
  /** OpenAPI responses written by a raw handler (206, 304, 416 of file downloads), merged as given. */
  extraResponses?: Record<number, Record<string, unknown>>
  /**
   * A wildcard route (`/files/*`): the shapes of the rest that it serves with raw slashes
   * (`:dir/:name`), each declared in OpenAPI as its own path, whose parameters are one segment.
   */
  restShapes?: string[]
  /** OpenAPI `security` of a route that checks its own credential (auth `public`): /metrics. */
  security?: Array<Record<string, string[]>>
  /** Extra OpenAPI header parameters (Idempotency-Key, Last-Event-ID). */
  headers?: Array<Record<string, unknown>>
  /**
   * Still served while the front end drains (GET /v1/health answers 503 `degraded` then, so a
   * load balancer probing it takes the node out); every other route answers 503 SERVICE_UNAVAILABLE.
   */
  servedWhileClosing?: boolean
  handler: (ctx: RouteContext) => Promise<Reply> | Reply
  /**
   * A public route whose answer never changes (the catalogue): compiled into the pipeline's
   * "answer from memory" stage (docs/architecture.md "Request pipeline"): the body serialised and
   * the header tail built once per format, GET/HEAD answered from them synchronously, without a
   * context object or a promise. `handler` still serves what that stage leaves to the rest of
   * the pipeline (If-None-Match, shutdown).
   */
  constant?: Reply
  /**
   * The "answer from memory" stage of an authenticated read (docs/architecture.md "Request
   * pipeline"): called after the caller was authenticated from the credential caches and
   * before the rate window is counted. Returns
   * the answer (its immutable body, `view`, and slots where its serialisations are kept) or
   * undefined to leave the request to `handler` (cache miss, not found, anything unusual). Must
   * not throw, must have no side effects, and must read `req` (path parameters) before returning.
   */
  fast?: (req: HttpRequest, caller: Caller, services: Services) => FastAnswer | undefined
  /**
   * With `fast`, on a route whose path ends with its one parameter: that parameter's value as
   * a string the body already holds (a job's id), so an answer from memory is metered under the
   * requested path without a string made per request (the row lives until the flush).
   */
  meterTail?: (body: object) => string
}

/**
 * What a `fast` handler answers with: the body, and where the bytes of each format are kept
 * once made (a cache entry that lives as long as the body does).
 */
export interface FastAnswer { readonly view: object; json: Buffer | undefined; toon: Buffer | undefined }
