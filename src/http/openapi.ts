import { Type, type TSchema } from '@sinclair/typebox'
import { ERRORS } from '../errors.js'
import type { Route } from './route.js'

/** SPEC.md section 7 envelope as a schema. */
export const ErrorEnvelope = Type.Object({
  error: Type.Literal(true),
  code: Type.String(),
  message: Type.String(),
  details: Type.Optional(Type.Unknown()),
  param: Type.Optional(Type.String()),
})

const GENERIC: Record<string, string[]> = {
  public: [],
  key: ['AUTH_REQUIRED', 'INVALID_API_KEY', 'KEY_EXPIRED', 'TOKEN_MALFORMED', 'TOKEN_EXPIRED', 'TOKEN_INVALID', 'USER_NOT_FOUND', 'PASSWORD_CHANGED', 'ACCOUNT_BANNED', 'insufficient_scope', 'RATE_LIMIT_EXCEEDED'],
  session: ['AUTH_REQUIRED', 'TOKEN_MALFORMED', 'TOKEN_EXPIRED', 'TOKEN_INVALID', 'USER_NOT_FOUND', 'PASSWORD_CHANGED', 'insufficient_scope', 'RATE_LIMIT_EXCEEDED'],
  admin: ['AUTH_REQUIRED', 'TOKEN_INVALID'],
}

function strip (schema: TSchema): unknown {
  // TypeBox adds a symbol-keyed `[Kind]`; JSON round trip keeps only the JSON Schema.
  return JSON.parse(JSON.stringify(schema))
}

/**
 * Builds /v1/openapi.json from the route table (DESIGN.md section 8): request and response
 * schemas come from the same TypeBox objects the validators compile, and `x-error-codes` from
 * src/errors.ts.
 */
export function buildOpenApi (routes: Route[], opts: { version: string; serverUrl: string }): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {}
  for (const r of routes) {
    const p = r.path.replace(/^\/v1/, '').replace(/:([A-Za-z_]+)/g, '{$1}')
    const op: Record<string, unknown> = {
      operationId: `${r.method.toLowerCase()}${p.replace(/[{}]/g, '').split(/[/_.-]/).map(s => s.charAt(0).toUpperCase() + s.slice(1)).join('')}`,
      summary: r.summary,
      tags: [r.tag],
    }
    const parameters: unknown[] = []
    for (const name of (r.path.match(/:([A-Za-z_]+)/g) ?? []).map(s => s.slice(1))) {
      const ps = r.schema?.params as { properties?: Record<string, unknown> } | undefined
      parameters.push({ name, in: 'path', required: true, schema: ps?.properties?.[name] ? strip(ps.properties[name] as TSchema) : { type: 'string' } })
    }
    const qs = r.schema?.query as { properties?: Record<string, TSchema>; required?: string[] } | undefined
    if (qs?.properties) {
      for (const [name, s] of Object.entries(qs.properties)) {
        parameters.push({ name, in: 'query', required: qs.required?.includes(name) ?? false, schema: strip(s) })
      }
    }
    if (r.headers) for (const h of r.headers) parameters.push(h)
    if (parameters.length) op.parameters = parameters
    if (r.schema?.body) {
      op.requestBody = { required: true, content: { 'application/json': { schema: strip(r.schema.body) } } }
    } else if (r.rawBody && r.rawBodySchema) {
      op.requestBody = { required: true, content: r.rawBodySchema }
    }
    const responses: Record<string, unknown> = {}
    for (const [status, s] of Object.entries(r.schema?.response ?? {})) {
      responses[status] = { description: `HTTP ${status}`, content: { 'application/json': { schema: strip(s) } } }
    }
    if (Object.keys(responses).length === 0) responses['200'] = { description: 'OK' }
    const codes = new Set([...(GENERIC[r.auth] ?? []), ...(r.errors ?? []), 'INTERNAL_ERROR'])
    if (r.schema?.body || r.schema?.query) codes.add('VALIDATION_ERROR')
    if (r.schema?.body) codes.add('PAYLOAD_TOO_LARGE')
    const byStatus = new Map<number, string[]>()
    for (const c of codes) {
      const e = ERRORS[c as keyof typeof ERRORS]
      if (!e || e.status === 0) continue
      byStatus.set(e.status, [...(byStatus.get(e.status) ?? []), c])
    }
    for (const [status, cs] of [...byStatus].sort((a, b) => a[0] - b[0])) {
      if (responses[String(status)]) continue
      responses[String(status)] = { description: cs.join(', '), content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } }
    }
    op.responses = responses
    if (r.auth === 'key') op.security = [{ ApiKeyHeader: [] }, { BearerAuth: [] }]
    else if (r.auth === 'session') op.security = [{ SessionJwt: [] }]
    else if (r.auth === 'admin') op.security = [{ AdminToken: [] }]
    else op.security = []
    if (r.scope) op['x-required-scope'] = r.scope
    ;(paths[p] ??= {})[r.method.toLowerCase()] = op
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Generation Job Service API',
      version: '1.0.0',
      description: 'Submit AI video, image and audio generation jobs paid in credits; get results by polling, Server-Sent Events or signed webhooks. Send `Accept: application/toon` on any route for TOON.',
      'x-service-version': opts.version,
    },
    servers: [{ url: `${opts.serverUrl}/v1` }],
    paths,
    components: {
      schemas: { Error: strip(ErrorEnvelope) },
      securitySchemes: {
        ApiKeyHeader: { type: 'apiKey', in: 'header', name: 'X-API-Key' },
        BearerAuth: { type: 'http', scheme: 'bearer', description: 'API key as a bearer token' },
        SessionJwt: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'Dashboard session from POST /auth/login' },
        AdminToken: { type: 'http', scheme: 'bearer', description: 'Operator ADMIN_TOKEN' },
      },
    },
    'x-error-codes': Object.entries(ERRORS).map(([code, e]) => ({ code, http_status: e.status === 0 ? null : e.status, message: e.message })),
  }
}
