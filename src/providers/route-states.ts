import type { Shards } from '../shard/shard-pool.js'
import type { RouteState } from './registry.js'

/**
 * The operator's route view of this node (docs/providers.md "Routing", Operators): each
 * route of PROVIDERS_FILE with its breaker, in-flight and queued jobs summed over the shards.
 * Shown by `GET /v1/admin/providers` and /metrics only; the public health never lists routes,
 * providers or upstream models. Empty without a routing file (every model simulated).
 */
export async function nodeRouteStates (shards: Shards, providersFile: string | undefined): Promise<RouteState[]> {
  if (!providersFile) return []
  const per = await Promise.all(Array.from({ length: shards.size }, (_, i) => shards.askShard(i, { type: 'shard.routes' }, 2000).catch(() => [] as RouteState[])))
  const byRoute = new Map<string, RouteState>()
  for (const list of per) {
    for (const r of list) {
      const a = byRoute.get(r.route)
      if (!a) { byRoute.set(r.route, { ...r }); continue }
      a.in_flight += r.in_flight
      a.queued += r.queued
      if (r.breaker === 'open') a.breaker = 'open'
    }
  }
  return [...byRoute.values()]
}
