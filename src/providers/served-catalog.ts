/**
 * GET /v1/models as the routing file can serve it (docs/providers.md "Real providers",
 * docs/providers.md "Capabilities"): per model, only the option values some route serves. A
 * model the routing file does not list runs on the simulated provider, which serves them all.
 * Computed once per thread when the routes are loaded (Providers.load), then returned by
 * identity with its own strong ETag, like the catalogue body it derives from.
 */
import { etagOf, MODELS_ETAG, modelsResponse } from '../catalog/index.js'
import { imageModel, videoModel } from '../catalog/models.js'
import { baseRequest, catalogueValues, schemaOfRoute, servedValues } from './capabilities.js'
import type { RoutingTable } from './routing.js'

export interface ModelsBody { body: unknown; etag: string }

let current: ModelsBody = { body: modelsResponse, etag: MODELS_ETAG }

/** The body GET /v1/models answers in this thread. */
export function servedModels (): ModelsBody { return current }

/** Recomputes the body for a routing table (null: everything simulated, the full catalogue). */
export function useRouting (table: RoutingTable | null): void {
  current = table === null ? { body: modelsResponse, etag: MODELS_ETAG } : build(table)
}

/** The values of `field` some route of `model` serves, in catalogue order. */
function served (table: RoutingTable, model: string, kind: 'video' | 'image', field: string): unknown[] {
  const values = catalogueValues(model, field)
  const base = baseRequest(model, kind)
  const ok = new Set<unknown>()
  for (const spec of table.routes[model]) for (const v of servedValues(spec, schemaOfRoute(spec), model, field, values, base)) ok.add(v)
  return values.filter(v => ok.has(v))
}

const VIDEO_KEYS: Record<string, string> = { aspect_ratio: 'aspect_ratios', duration: 'durations', resolution: 'resolutions', mode: 'modes' }

/** The fields of the catalogue's entries this module narrows to what the routes serve. */
type Entry = { id: string; resolutions?: unknown[]; aspect_ratios?: unknown[]; capabilities?: { output_formats?: unknown[] }; [option: string]: unknown }
interface CatalogueCopy { video: Entry[]; image: Entry[] }

function build (table: RoutingTable): ModelsBody {
  const body = structuredClone(modelsResponse) as unknown as CatalogueCopy
  for (const entry of body.video) {
    if (!table.routes[entry.id] || !videoModel(entry.id)) continue
    for (const [field, key] of Object.entries(VIDEO_KEYS)) {
      if (entry[key] === undefined) continue
      entry[key] = served(table, entry.id, 'video', field)
    }
  }
  for (const entry of body.image) {
    if (!table.routes[entry.id] || !imageModel(entry.id)) continue
    if (entry.resolutions !== undefined) entry.resolutions = served(table, entry.id, 'image', 'resolution')
    entry.aspect_ratios = served(table, entry.id, 'image', 'aspect_ratio')
    if (entry.capabilities?.output_formats) entry.capabilities.output_formats = served(table, entry.id, 'image', 'output_format')
  }
  return { body: deepFreeze(body), etag: etagOf(body) }
}

function deepFreeze<T> (v: T): T {
  if (v !== null && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v)
    for (const k of Object.keys(v)) deepFreeze((v as Record<string, unknown>)[k])
  }
  return v
}
