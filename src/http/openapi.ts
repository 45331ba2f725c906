import { Type, type TSchema } from '@sinclair/typebox'
import { ERRORS } from '../errors.js'
import { Job } from '../catalog/schemas.js'
import type { Route } from './route.js'

/** One schema problem of a VALIDATION_ERROR: a JSON Pointer into the body or query ('' = all of it). */
const ValidationIssue = Type.Object({ path: Type.String(), message: Type.String() })

/**
 * docs/api.md "Errors" envelope as a schema, with every field some code adds (grep ApiError extras):
 * clients generated from the document can read them typed.
 */
export const ErrorEnvelope = Type.Object({
  error: Type.Literal(true),
  code: Type.String({ description: 'One of x-error-codes' }),
  message: Type.String(),
  details: Type.Optional(Type.Union([
    Type.Array(ValidationIssue, { description: 'VALIDATION_ERROR: every problem' }),
    Type.Object({
      job_id: Type.Optional(Type.String({ description: 'GATEWAY_TIMEOUT: the job that was created and charged; poll it instead of resubmitting' })),
      kind: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: 'Uploads: the kind the limit or type rule belongs to' })),
      max_bytes: Type.Optional(Type.Integer({ description: 'PAYLOAD_TOO_LARGE on uploads: the cap' })),
      allowed_extensions: Type.Optional(Type.Array(Type.String())),
      detected: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: 'UNSUPPORTED_MEDIA_TYPE: the type found in the file' })),
    }, { description: 'Context of the error' }),
  ], { description: 'Validation issues (VALIDATION_ERROR) or context (GATEWAY_TIMEOUT: job_id; uploads)' })),
  param: Type.Optional(Type.String({ description: 'The offending field (UNSUPPORTED_OPTION, INVALID_PARAM)' })),
  required_scope: Type.Optional(Type.String({ description: 'insufficient_scope: the scope the route needs (generate, read, or session)' })),
  pricing_url: Type.Optional(Type.String({ description: 'upgrade_required: where to buy a plan' })),
  retry_after: Type.Optional(Type.Integer({ minimum: 0, description: 'Every 429: seconds to wait, as in the Retry-After header' })),
  reason: Type.Optional(Type.String({ description: 'NOT_ELIGIBLE: the first reason' })),
  reasons: Type.Optional(Type.Array(Type.String(), { description: 'NOT_ELIGIBLE: every reason (email_unverified, account_banned, credits_locked)' })),
  violations: Type.Optional(Type.Integer({ description: 'CONTENT_POLICY_VIOLATION: the account\'s violations so far' })),
  max_concurrent: Type.Optional(Type.Integer({ description: 'concurrency_limit_reached: the key\'s cap' })),
  in_flight: Type.Optional(Type.Integer({ description: 'concurrency_limit_reached: jobs in flight now' })),
  max_streams: Type.Optional(Type.Integer({ description: 'TOO_MANY_STREAMS: the account\'s cap' })),
  required: Type.Optional(Type.Integer({ description: 'INSUFFICIENT_CREDITS: the price' })),
  available: Type.Optional(Type.Integer({ description: 'INSUFFICIENT_CREDITS: the spendable balance' })),
  status: Type.Optional(Type.String({ description: 'CANNOT_CANCEL: the job\'s status' })),
})

/** 504 GATEWAY_TIMEOUT: `details.job_id` is always there (the job to poll instead of paying twice). */
const GatewayTimeoutError = {
  allOf: [
    { $ref: '#/components/schemas/Error' },
    { type: 'object', required: ['details'], properties: { details: { type: 'object', required: ['job_id'], properties: { job_id: { type: 'string' } } } } },
  ],
}

/** Webhook delivery body (docs/api.md "Webhooks"). */
const WebhookEvent = {
  type: 'object',
  required: ['id', 'type', 'created_at', 'data'],
  properties: {
    id: { type: 'string', description: 'evt_...; with the job id and type, the receivers\' dedupe key' },
    type: { type: 'string', enum: ['job.completed', 'job.failed'] },
    created_at: { type: 'string', format: 'date-time' },
    data: { type: 'object', required: ['job'], properties: { job: { $ref: '#/components/schemas/Job' } } },
  },
}

/** The headers of every webhook delivery attempt (docs/api.md "Webhooks"). */
const WEBHOOK_HEADERS = [
  { name: 'X-Service-Signature', in: 'header', required: true, description: '`t=<unix seconds>,sha256=<hex>`: HMAC-SHA256 of the secret over `<t>.<raw body>`; reject a t older than 300 s', schema: { type: 'string', pattern: '^t=[0-9]+,sha256=[0-9a-f]{64}$' } },
  { name: 'X-Service-Event', in: 'header', required: true, description: 'The event type, as `type` in the body', schema: { type: 'string', enum: ['job.completed', 'job.failed'] } },
  { name: 'X-Service-Delivery', in: 'header', required: true, description: 'Delivery id, the same on every retry of one delivery', schema: { type: 'string' } },
]

function webhookOperation (event: string, summary: string): Record<string, unknown> {
  return {
    post: {
      operationId: `webhook${event.split('.').map(s => s.charAt(0).toUpperCase() + s.slice(1)).join('')}`,
      summary,
      description: 'Sent to a URL registered with POST /webhooks or given as webhook_url on a generate or extend request. At least once; retried after 5 s, 30 s, 2 min, 10 min, 30 min, 1 h, 3 h, 6 h, 12 h, 24 h until a 2xx; a 410 disables a registered webhook; 10 s timeout; redirects are not followed.',
      parameters: WEBHOOK_HEADERS,
      // The receiver is the client's own server: no credential is sent; X-Service-Signature proves the sender.
      security: [],
      requestBody: { required: true, content: { 'application/json': { schema: { allOf: [{ $ref: '#/components/schemas/WebhookEvent' }, { type: 'object', properties: { type: { const: event } } }] } } } },
      responses: {
        '2XX': { description: 'Received; no more attempts' },
        410: { description: 'Gone: a registered webhook is disabled' },
        default: { description: 'Anything else (or no answer within 10 s) is retried' },
      },
    },
  }
}

/** `application/toon` (docs/api.md "TOON") next to every JSON answer: the same data, TOON-encoded. */
function withToon (content: Record<string, unknown>): Record<string, unknown> {
  const json = content['application/json'] as { schema?: unknown } | undefined
  if (!json || content['application/toon']) return content
  return { ...content, 'application/toon': { schema: json.schema, 'x-encoding': 'TOON (@toon-format/toon) of the JSON schema; header X-TOON-Dict names the key dictionary' } }
}

const GENERIC: Record<string, string[]> = {
  public: [],
  key: ['AUTH_REQUIRED', 'INVALID_API_KEY', 'KEY_EXPIRED', 'TOKEN_MALFORMED', 'TOKEN_EXPIRED', 'TOKEN_INVALID', 'USER_NOT_FOUND', 'PASSWORD_CHANGED', 'ACCOUNT_BANNED', 'insufficient_scope', 'RATE_LIMIT_EXCEEDED'],
  // An API key sent to a session route is checked first (then refused with insufficient_scope).
  session: ['AUTH_REQUIRED', 'INVALID_API_KEY', 'KEY_EXPIRED', 'ACCOUNT_BANNED', 'TOKEN_MALFORMED', 'TOKEN_EXPIRED', 'TOKEN_INVALID', 'USER_NOT_FOUND', 'PASSWORD_CHANGED', 'insufficient_scope', 'RATE_LIMIT_EXCEEDED'],
  admin: ['AUTH_REQUIRED', 'TOKEN_INVALID'],
}

function strip (schema: TSchema): unknown {
  // TypeBox adds a symbol-keyed `[Kind]`; JSON round trip keeps only the JSON Schema.
  return JSON.parse(JSON.stringify(schema))
}

/** Tag descriptions, in the order Swagger UI shows them (tags not listed follow in route order). */
const TAGS: Record<string, string> = {
  System: 'Health, this description and the interactive reference',
  Discovery: 'Model catalogue and pricing (public)',
  Generation: 'Create video, image and audio jobs (scope generate)',
  Jobs: 'Poll and cancel jobs (scope read)',
  Library: 'Finished videos and images (scope read)',
  Assets: 'Characters and voices for gemini-omni (scope read)',
  Credits: 'Credit balance (scope read)',
  Usage: 'Usage analytics and effective limits (scope read)',
  Events: 'Server-Sent Events for a job (scope read)',
  Webhooks: 'Signed job notifications (scope generate)',
  Uploads: 'Media inputs for generation (scope generate)',
  Sessions: 'Dashboard sign-up, login and password',
  'API keys': 'Key management (dashboard session only)',
  Operator: 'Operator API (ADMIN_TOKEN); /metrics also takes METRICS_TOKEN',
  Admin: 'Operator views of jobs and provider routes (ADMIN_TOKEN)',
  Providers: 'Callbacks from fal, Replicate and Kie (each verified by its provider\'s signature)',
  Files: 'Stored media downloads',
}

const AUTH_TEXT: Record<string, string> = {
  public: 'Public.',
  key: 'API key (X-API-Key or Authorization: Bearer) or dashboard session JWT.',
  session: 'Dashboard session JWT only (an API key gets 403 insufficient_scope).',
  admin: 'Operator: Authorization: Bearer <ADMIN_TOKEN>.',
}

const H = (name: string) => ({ $ref: `#/components/headers/${name}` })

/**
 * Where a route is served from: `/v1/...` hangs from the `/v1` server URLs of the document;
 * `/v1` itself and every path outside it (`/`, file downloads, /metrics, the dashboard, embed
 * pages) from the root, declared with path-level `servers`.
 */
export type Base = 'v1' | 'root'

export function routeBase (routePath: string): Base {
  return routePath.startsWith('/v1/') ? 'v1' : 'root'
}

/** OpenAPI path of a route path, relative to its base: `:id` becomes `{id}`, a trailing `*` `{path}`. */
export function openApiPath (routePath: string): string {
  return (routePath.startsWith('/v1/') ? routePath.slice(3) : routePath)
    .replace(/:([A-Za-z_]+)/g, '{$1}')
    .replace(/\/\*$/, '/{path}')
}

/** Methods a route is declared with: a raw GET that answers HEAD itself (downloads) declares both. */
export function declaredMethods (r: Route): string[] {
  return r.head ? [r.method, 'HEAD'] : [r.method]
}

/**
 * Every OpenAPI path a route is declared at: its own and, for a wildcard route, one per
 * `restShapes` entry. An OpenAPI path parameter is one segment (slashes in it must be
 * percent-encoded), so a URL whose rest has raw slashes matches only a shape of its depth.
 */
export function declaredPaths (r: Route): string[] {
  const own = openApiPath(r.path)
  if (!r.path.endsWith('/*') || !r.restShapes) return [own]
  const prefix = r.path.slice(0, -1)
  return [own, ...r.restShapes.map(shape => openApiPath(prefix + shape))]
}

/** A route's body is read and parsed as JSON by the front end (src/http/server.ts, src/http/body.ts). */
function readsJsonBody (r: Route): boolean {
  return (r.method === 'POST' || r.method === 'PATCH' || r.method === 'PUT') && !r.rawBody
}

/** Every error code a route can answer: its own plus those of its credential, body, query and path. */
export function routeErrorCodes (r: Route): string[] {
  // A credential in the query string (`?api_key=`) is refused on every route (src/http/auth.ts).
  const codes = new Set([...(GENERIC[r.auth] ?? []), ...(r.errors ?? []), 'INVALID_API_KEY', 'INTERNAL_ERROR', 'SERVICE_UNAVAILABLE'])
  if (r.schema?.body || r.schema?.query) codes.add('VALIDATION_ERROR')
  if (readsJsonBody(r)) {
    // Any body is parsed (malformed JSON is a 400) and capped, and a non-JSON Content-Type is refused.
    for (const c of ['VALIDATION_ERROR', 'PAYLOAD_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE']) codes.add(c)
  }
  // A path parameter that is not valid percent-encoding is refused by the front end (src/http/server.ts).
  if (/[:*]/.test(r.path)) codes.add(r.path.includes(':') ? 'INVALID_PARAM' : 'NOT_FOUND')
  return [...codes].filter(c => c in ERRORS)
}

/** The request body of a JSON route, with the Content-Type rule of src/http/body.ts. */
const JSON_BODY_NOTE = 'Sent as `application/json` (or `application/*+json`). A body with no Content-Type, or with curl\'s default `application/x-www-form-urlencoded`, is read as JSON too; any other type is 415 UNSUPPORTED_MEDIA_TYPE (docs/decisions.md "JSON bodies and Content-Type").'

/**
 * Builds /v1/openapi.json from the route table (docs/decisions.md "Where the OpenAPI document hangs each route"): request and response
 * schemas come from the same TypeBox objects the validators compile, and `x-error-codes` from
 * src/errors.ts (the document's table, and per operation the codes it can answer). Every
 * route is declared, at its own base, with its real credential.
 */
export function buildOpenApi (routes: Route[], opts: { version: string; serverUrl: string }): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {}
  const operationIds = new Set<string>()
  const tagOrder: string[] = []
  const bases = new Map<string, Set<Base>>()
  const declaredBy = new Map<string, Route>()
  for (const r of routes) {
    for (const p of declaredPaths(r)) {
      const base = routeBase(r.path)
      for (const method of declaredMethods(r)) {
        const m = method.toLowerCase()
        const seen = declaredBy.get(`${m} ${p}`)
        if (seen) {
          // The same operation served at the root and under /v1 (file downloads): declared once, with both servers.
          if (seen.handler !== r.handler) throw new Error(`${method} ${p} is declared by two routes (${seen.path}, ${r.path})`)
          bases.get(p)!.add(base)
          continue
        }
        declaredBy.set(`${m} ${p}`, r)
        let b = bases.get(p)
        if (!b) bases.set(p, b = new Set())
        b.add(base)
        if (!tagOrder.includes(r.tag)) tagOrder.push(r.tag)
        ;(paths[p] ??= {})[m] = operation(r, p, method, operationIds)
      }
    }
  }
  // Path-level servers for what is not (only) under /v1. Generated clients that ignore them
  // still reach file downloads, which are also under /v1.
  const v1Servers = [{ url: `${opts.serverUrl}/v1`, description: 'PUBLIC_BASE_URL' }, { url: '/v1', description: 'The origin serving this document' }]
  const rootServer = { url: opts.serverUrl, description: 'PUBLIC_BASE_URL, outside /v1' }
  for (const [p, b] of bases) if (b.has('root')) paths[p].servers = b.has('v1') ? [...v1Servers, rootServer] : [rootServer]

  return document(paths, tagOrder, v1Servers, opts)
}

/** One operation of route `r` at OpenAPI path `p` (its own path or one of its rest shapes). */
function operation (r: Route, p: string, method: string, operationIds: Set<string>): Record<string, unknown> {
  const head = method === 'HEAD'
  const words = p === '/' ? 'Root' : p.replace(/[{}]/g, '').split(/[/_.-]/).map(s => s.charAt(0).toUpperCase() + s.slice(1)).join('')
  let operationId = `${method.toLowerCase()}${words}`
  for (let i = 2; operationIds.has(operationId); i++) operationId = operationId.replace(/\d*$/, String(i))
  operationIds.add(operationId)
  const shape = p !== openApiPath(r.path)
  const op: Record<string, unknown> = {
    operationId,
    summary: head ? `Headers of: ${r.summary}` : r.summary,
    description: [
      AUTH_TEXT[r.auth] ?? '',
      r.scope ? `Scope: \`${r.scope}\`.` : '',
      shape ? 'The rest of the path with its slashes as they are (one parameter per segment).' : '',
      head ? 'HEAD: the status and headers GET would answer, without the body.' : '',
    ].filter(Boolean).join(' '),
    tags: [r.tag],
  }
  const parameters: unknown[] = []
  const ps = r.schema?.params as { properties?: Record<string, unknown> } | undefined
  for (const [, name] of p.matchAll(/\{([^}]+)\}/g)) {
    if (name === 'path' && r.path.endsWith('/*') && !shape) {
      parameters.push({ name, in: 'path', required: true, description: 'The rest of the path as one segment: its `/` percent-encoded (`%2F`), as generated clients send it. With raw slashes, the URL matches the operation of its depth', schema: { type: 'string' } })
    } else if (shape && !r.path.includes(`:${name}`)) {
      parameters.push({ name, in: 'path', required: true, description: 'One segment of the rest of the path', schema: { type: 'string' } })
    } else {
      parameters.push({ name, in: 'path', required: true, schema: ps?.properties?.[name] ? strip(ps.properties[name] as TSchema) : { type: 'string' } })
    }
  }
  const qs = r.schema?.query as { properties?: Record<string, TSchema>; required?: string[] } | undefined
  if (qs?.properties) {
    for (const [name, s] of Object.entries(qs.properties)) {
      const schema = strip(s) as Record<string, unknown>
      const param: Record<string, unknown> = { name, in: 'query', required: qs.required?.includes(name) ?? false, schema }
      if (typeof schema.description === 'string') param.description = schema.description
      parameters.push(param)
    }
  }
  if (r.headers) for (const h of r.headers) parameters.push(h)
  if (parameters.length) op.parameters = parameters
  if (r.schema?.body) {
    const body = strip(r.schema.body) as { required?: string[] }
    op.requestBody = { required: (body.required?.length ?? 0) > 0, description: JSON_BODY_NOTE, content: { 'application/json': { schema: body } } }
  } else if (r.rawBody && r.rawBodySchema) {
    op.requestBody = { required: true, content: r.rawBodySchema }
  }

  const headersFor = (status: number) => {
    const h: Record<string, unknown> = { 'X-Request-Id': H('X-Request-Id') }
    if (r.auth === 'key' || r.auth === 'session') Object.assign(h, { 'X-RateLimit-Limit': H('X-RateLimit-Limit'), 'X-RateLimit-Remaining': H('X-RateLimit-Remaining') })
    if (status === 429) h['Retry-After'] = H('Retry-After')
    return h
  }
  const responses: Record<string, Record<string, unknown>> = {}
  for (const [status, s] of Object.entries(r.schema?.response ?? {})) {
    responses[status] = { description: `HTTP ${status}`, headers: headersFor(Number(status)), content: { 'application/json': { schema: strip(s) } } }
  }
  for (const [status, content] of Object.entries(r.responseContent ?? {})) {
    const resp = (responses[status] ??= { description: status === '204' ? 'No Content' : `HTTP ${status}`, headers: headersFor(Number(status)) })
    if (Object.keys(content).length) resp.content = { ...(resp.content as object | undefined), ...content }
  }
  for (const [status, extra] of Object.entries(r.extraResponses ?? {})) {
    responses[status] = { headers: headersFor(Number(status)), ...responses[status], ...extra }
  }
  if (!Object.keys(responses).some(s => s.startsWith('2'))) {
    // A raw handler that writes its own answer: bytes of the stored type (OAS 3.1 binary: no `type`).
    responses['200'] = r.rawBody
      ? { description: 'The bytes, with their stored Content-Type', headers: headersFor(200), content: { '*/*': { schema: { contentMediaType: 'application/octet-stream' } } } }
      : { description: 'OK', headers: headersFor(200) }
  }
  const codes = routeErrorCodes(r)
  const byStatus = new Map<number, string[]>()
  for (const c of codes) {
    const e = ERRORS[c as keyof typeof ERRORS]
    if (e.status === 0) continue
    byStatus.set(e.status, [...(byStatus.get(e.status) ?? []), c])
  }
  for (const [status, cs] of [...byStatus].sort((a, b) => a[0] - b[0])) {
    const existing = responses[String(status)]
    if (existing) { existing.description = `${existing.description}; or the error envelope: ${cs.join(', ')}`; continue }
    const schema = { $ref: `#/components/schemas/${status === 504 ? 'GatewayTimeoutError' : 'Error'}` }
    responses[String(status)] = { description: cs.join(', '), headers: headersFor(status), content: { 'application/json': { schema } } }
  }
  for (const resp of Object.values(responses)) {
    if (!resp.content) continue
    // HEAD answers carry the headers of the GET answer and no body.
    if (head) delete resp.content
    else resp.content = withToon(resp.content as Record<string, unknown>)
  }
  op.responses = responses
  op['x-error-codes'] = codes
  if (r.security) op.security = r.security
  else if (r.auth === 'key') op.security = [{ ApiKeyHeader: [] }, { BearerAuth: [] }]
  else if (r.auth === 'session') op.security = [{ SessionJwt: [] }]
  else if (r.auth === 'admin') op.security = [{ AdminToken: [] }]
  // A public route that answers AUTH_REQUIRED checks credentials itself (SSE: headers or ?ticket=).
  else if (r.errors?.includes('AUTH_REQUIRED')) op.security = [{ ApiKeyHeader: [] }, { BearerAuth: [] }, {}]
  else op.security = []
  if (r.scope) op['x-required-scope'] = r.scope
  return op
}

/** The document around the operations. */
function document (paths: Record<string, unknown>, tagOrder: string[], servers: unknown[], opts: { version: string }): Record<string, unknown> {
  return {
    openapi: '3.1.0',
    info: {
      title: 'Generation Job Service API',
      version: '1.0.0',
      description: 'Submit AI video, image and audio generation jobs paid in credits; get results by polling, Server-Sent Events or signed webhooks. Send `Accept: application/toon` for TOON: every answer declared as `application/json` (errors included) then comes as `application/toon`; HTML pages, scripts, metrics text, file bytes and event streams are sent as they are.',
      'x-service-version': opts.version,
    },
    // PUBLIC_BASE_URL first (clients, generators); the relative entry is the origin that served this document.
    servers,
    tags: [
      ...Object.keys(TAGS).filter(t => tagOrder.includes(t)), ...tagOrder.filter(t => !(t in TAGS))
    ].map(name => TAGS[name] ? { name, description: TAGS[name] } : { name }),
    paths,
    // OAS 3.1: what the service sends to the client's webhook receiver.
    webhooks: {
      'job.completed': webhookOperation('job.completed', 'A job completed (result_url set)'),
      'job.failed': webhookOperation('job.failed', 'A job failed (credits refunded)'),
    },
    components: {
      schemas: { Error: strip(ErrorEnvelope), GatewayTimeoutError, Job: strip(Job), WebhookEvent },
      headers: {
        'X-Request-Id': { description: 'Request id (echoes a valid X-Request-Id sent by the client)', schema: { type: 'string' } },
        'X-RateLimit-Limit': { description: 'Requests allowed per sliding 60 s window for this credential', schema: { type: 'integer' } },
        'X-RateLimit-Remaining': { description: 'Requests left in the current window', schema: { type: 'integer' } },
        'Retry-After': { description: 'Seconds to wait before retrying', schema: { type: 'integer' } },
      },
      securitySchemes: {
        ApiKeyHeader: { type: 'apiKey', in: 'header', name: 'X-API-Key' },
        BearerAuth: { type: 'http', scheme: 'bearer', description: 'API key as a bearer token' },
        SessionJwt: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'Dashboard session from POST /auth/login' },
        AdminToken: { type: 'http', scheme: 'bearer', description: 'Operator ADMIN_TOKEN' },
        MetricsToken: { type: 'http', scheme: 'bearer', description: 'METRICS_TOKEN, for a Prometheus scraper (GET /metrics only)' },
      },
    },
    'x-error-codes': Object.entries(ERRORS).map(([code, e]) => ({ code, http_status: e.status === 0 ? null : e.status, message: e.message })),
  }
}
