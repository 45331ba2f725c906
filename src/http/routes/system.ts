import { etagOf } from '../../catalog/index.js'
import { Type } from '@sinclair/typebox'
import type { Route } from '../route.js'
import type { Services } from '../../services.js'
import { ping } from '../../db/connect.js'

/**
 * Public health (docs/providers.md "Routing", Operators): status, version and checks
 * only. The route view (providers, upstream models, counts) is the operator's:
 * GET /v1/admin/providers and /metrics.
 */
const Health = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('degraded')]),
  service: Type.String(),
  version: Type.String(),
  timestamp: Type.String({ format: 'date-time' }),
  checks: Type.Object({ database: Type.String() }),
}, { additionalProperties: false })

/** Probe state per service instance (several apps can share a process, e.g. in tests). */
interface Probe { last: { at: number; ok: boolean } | null; probing: Promise<boolean> | null }
const probes = new WeakMap<Services, Probe>()

/** The database ping (src/db/connect.ts) with a 2 s budget; results are reused for 500 ms so a load balancer's probes stay cheap. */
async function databaseUp (s: Services): Promise<boolean> {
  let p = probes.get(s)
  if (!p) { p = { last: null, probing: null }; probes.set(s, p) }
  const { last } = p
  if (last && Date.now() - last.at < 500) return last.ok
  const probe = p
  probe.probing ??= (async () => {
    let timer: NodeJS.Timeout | undefined
    try {
      await Promise.race([
        ping(s.sql),
        new Promise((_resolve, reject) => { timer = setTimeout(() => reject(new Error('timeout')), 2000) }),
      ])
      return true
    } catch { return false } finally {
      clearTimeout(timer)
    }
  })()
  try {
    const ok = await probe.probing
    probe.last = { at: Date.now(), ok }
    return ok
  } finally { probe.probing = null }
}

const Index = Type.Object({
  service: Type.String(),
  version: Type.String(),
  docs: Type.String({ description: 'Interactive reference (GET /v1/docs)' }),
  openapi: Type.String({ description: 'OpenAPI 3.1 description (GET /v1/openapi.json)' }),
  health: Type.String(),
  models: Type.String({ description: 'Model catalogue and prices (public)' }),
  dashboard: Type.String({ description: 'Developer dashboard (HTML): keys, jobs, usage, webhooks (GET /dashboard)' }),
})

/** What GET / and GET /v1 answer: where to look next, one frozen body per base URL. */
const indexes = new Map<string, object>()
function indexBody (s: Services): object {
  const base = s.config.publicBaseUrl
  let b = indexes.get(base)
  if (!b) {
    b = Object.freeze({ service: 'genjobs', version: s.version, docs: `${base}/v1/docs`, openapi: `${base}/v1/openapi.json`, health: `${base}/v1/health`, models: `${base}/v1/models`, dashboard: `${base}/dashboard` })
    indexes.set(base, b)
  }
  return b
}

/** GET /, GET /v1, GET /v1/health and GET /v1/openapi.json (docs/api.md "Endpoints", docs/operations.md "Running in production"). */
export function systemRoutes (openapi: () => unknown): Route[] {
  const index: Route = {
    method: 'GET',
    path: '/v1',
    auth: 'public',
    summary: 'Where to start: links to the interactive reference, the OpenAPI document, health, the models and the dashboard',
    tag: 'System',
    schema: { response: { 200: Index } },
    handler: (ctx) => ({ body: indexBody(ctx.services), immutable: true, headers: { 'Cache-Control': 'public, max-age=300' } }),
  }
  return [
    index,
    { ...index, path: '/' },
    {
      method: 'GET',
      path: '/v1/health',
      auth: 'public',
      summary: 'Service health; 503 with status degraded when PostgreSQL is unreachable or the node is shutting down',
      tag: 'System',
      schema: { response: { 200: Health, 503: Health } },
      servedWhileClosing: true,
      async handler (ctx) {
        const up = await databaseUp(ctx.services)
        // A draining node is not healthy whatever its database says: a load balancer takes it out.
        const ok = up && ctx.services.closing !== true
        return {
          status: ok ? 200 : 503,
          headers: { 'Cache-Control': 'no-store' },
          body: {
            status: ok ? 'ok' : 'degraded',
            service: 'genjobs',
            version: ctx.services.version,
            timestamp: new Date().toISOString(),
            checks: { database: up ? 'ok' : 'unreachable' },
          },
        }
      },
    },
    {
      method: 'GET',
      path: '/v1/openapi.json',
      auth: 'public',
      summary: 'OpenAPI 3.1 description with the x-error-codes table',
      tag: 'System',
      responseContent: {
        200: {
          'application/json': {
            schema: {
              type: 'object',
              description: 'This OpenAPI 3.1 document',
              required: ['openapi', 'info', 'paths', 'x-error-codes'],
              properties: {
                openapi: { type: 'string', const: '3.1.0' },
                info: { type: 'object', required: ['title', 'version'], properties: { title: { type: 'string' }, version: { type: 'string' } } },
                paths: { type: 'object' },
                'x-error-codes': {
                  type: 'array',
                  items: { type: 'object', required: ['code', 'http_status', 'message'], properties: { code: { type: 'string' }, http_status: { type: ['integer', 'null'] }, message: { type: 'string' } } },
                },
              },
            },
          },
        },
      },
      handler () {
        const doc = openapi() as object
        return { body: doc, etag: docEtag(doc), headers: { 'Cache-Control': 'public, max-age=300' } }
      },
    },
  ]
}

/** The document is built once (frozen), so its tag is computed once, with the catalogue's etagOf. */
const etags = new WeakMap<object, string>()
function docEtag (doc: object): string {
  let e = etags.get(doc)
  if (!e) { e = etagOf(doc); etags.set(doc, e) }
  return e
}
