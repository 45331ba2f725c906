import { createHash, timingSafeEqual } from 'node:crypto'
import { ApiError } from '../../errors.js'
import type { Route } from '../route.js'

const digests = new Map<string, Buffer>()
const digest = (s: string): Buffer => {
  let d = digests.get(s)
  if (!d) { d = createHash('sha256').update(s).digest(); digests.set(s, d) }
  return d
}

/**
 * GET /metrics (docs/operations.md "Metrics"): Prometheus text format, outside /v1.
 * `Authorization: Bearer <METRICS_TOKEN or ADMIN_TOKEN>`, both compared in constant time.
 */
export const routes: Route[] = [
  {
    method: 'GET',
    path: '/metrics',
    auth: 'public',
    summary: 'Prometheus metrics (Authorization: Bearer <METRICS_TOKEN or ADMIN_TOKEN>)',
    tag: 'Operator',
    errors: ['AUTH_REQUIRED', 'TOKEN_INVALID'],
    // The handler checks the credential: either token as a Bearer, never an API key or anonymous.
    security: [{ MetricsToken: [] }, { AdminToken: [] }],
    responseContent: { 200: { 'text/plain; version=0.0.4': { schema: { type: 'string' } } } },
    async handler (ctx) {
      const s = ctx.services
      const m = /^Bearer\s+(\S+)\s*$/i.exec(ctx.headers.authorization ?? '')
      if (!m) throw new ApiError('AUTH_REQUIRED', 'GET /metrics needs Authorization: Bearer <METRICS_TOKEN or ADMIN_TOKEN>')
      const token = s.config.metricsToken
      const given = createHash('sha256').update(m[1]).digest()
      const isMetricsToken = token !== undefined && timingSafeEqual(given, digest(token))
      if (!isMetricsToken) {
        try { s.auth.checkAdmin(ctx.headers.authorization) } catch {
          throw new ApiError('TOKEN_INVALID', 'Metrics token is wrong')
        }
      }
      const text = await s.metrics.scrape()
      return { raw: Buffer.from(text), contentType: s.metrics.registry.contentType, headers: { 'Cache-Control': 'no-store' } }
    },
  },
]
