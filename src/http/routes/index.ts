import type { Route } from '../route.js'
import { routes as admin } from './admin.js'
import { routes as assets } from './assets.js'
import { routes as auth } from './auth.js'
import { routes as catalog } from './catalog.js'
import { routes as credits } from './credits.js'
import { routes as docs } from './docs.js'
import { routes as files } from './files.js'
import { routes as generate } from './generate.js'
import { routes as jobs } from './jobs.js'
import { routes as keys } from './keys.js'
import { routes as dashboard } from './dashboard.js'
import { routes as ledger } from './ledger.js'
import { routes as library } from './library.js'
import { routes as metrics } from './metrics.js'
import { routes as embed } from './embed.js'
import { routes as providers } from './providers.js'
import { routes as sse } from './sse.js'
import { systemRoutes } from './system.js'
import { routes as usage } from './usage.js'
import { routes as uploads } from './uploads.js'
import { routes as webhooks } from './webhooks.js'

/** Every route of the service, in OpenAPI order. `openapi` is read lazily (it lists these). */
export function allRoutes (openapi: () => unknown, extra: Route[] = []): Route[] {
  return [
    ...systemRoutes(openapi), ...docs, ...catalog, ...extra, ...generate, ...jobs, ...library, ...assets, ...credits, ...ledger, ...usage, ...sse,
    ...webhooks, ...uploads, ...auth, ...keys, ...admin, ...providers, ...embed, ...metrics, ...dashboard, ...files
  ]
}
