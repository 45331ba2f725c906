import type { Route } from '../route.js'
import { routes as admin } from './admin.js'
import { routes as auth } from './auth.js'
import { routes as catalog } from './catalog.js'
import { routes as keys } from './keys.js'
import { systemRoutes } from './system.js'

/** Every route of the service, in OpenAPI order. `openapi` is read lazily (it lists these). */
export function allRoutes (openapi: () => unknown, extra: Route[] = []): Route[] {
  return [...systemRoutes(openapi), ...catalog, ...extra, ...auth, ...keys, ...admin]
}
