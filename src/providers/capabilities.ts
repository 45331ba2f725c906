/**
 * Capability-aware routing (docs/providers.md "Capabilities"): from a route's upstream schema
 * (config/upstream-schemas) and its input mapping, whether the route can serve one request, and
 * which catalogue option values it can serve at all.
 *
 * A route serves a request when
 * 1. every option or input the request carries reaches the upstream: the mapping reads the field
 *    (`"$.aspect_ratio"`, `{from: "$.duration"}`), or the route's `serves` lists the value (the
 *    upstream does it without a field: an image-to-video endpoint follows the frame, so
 *    `"serves": {"aspect_ratio": ["adaptive"]}`). A route without a mapping sends every field;
 * 2. the mapped input passes the upstream schema (enums, types, required fields; an empty list
 *    counts as unset), so nothing is sent that the provider would refuse (fal refuses late, after
 *    the charge: only this check routes around it).
 * "Carries" leaves out a value equal to the model's default: a client that did not choose
 * gets the upstream's own default for an option the route does not map, and the price of our
 * default (the catalogue's cheapest value). Pure: no I/O besides the schema files read once.
 */
import { imageModel, LIP_SYNC_MODES, videoModel } from '../catalog/models.js'
import { ApiError } from '../errors.js'
import { mapInput, type InputValue, type RouteSpec } from './routing.js'
import { checkInput, loadUpstreamSchema, type InputIssue, type UpstreamSchema } from './upstream-schemas.js'

/** Option fields whose values GET /v1/models lists and UNSUPPORTED_OPTION names. */
export const OPTION_FIELDS: Readonly<Record<'video' | 'image', readonly string[]>> = {
  video: ['aspect_ratio', 'duration', 'resolution', 'mode', 'lip_sync_mode'],
  image: ['aspect_ratio', 'resolution', 'output_format'],
}

/** Request fields a route must pass on when the request sets them (media, switches, lists). */
const INPUT_FIELDS = [
  'image_url', 'last_frame_url', 'image_urls', 'reference_image_urls', 'reference_video_urls', 'reference_audio_urls',
  'audio_url', 'generate_audio', 'sound', 'multi_shots', 'multi_prompt', 'kling_elements',
] as const

/** Why one route cannot serve one request: the request field at fault (or the upstream field). */
export interface Unserved { field: string; reason: string }

/** The model's default for a field of this request (what it holds when the client says nothing). */
export function defaultOf (model: string, field: string, request: Record<string, unknown>): unknown {
  const v = videoModel(model)
  if (v) {
    switch (field) {
      case 'aspect_ratio': return v.defaults.aspect_ratio
      case 'duration': return v.defaults.duration
      case 'resolution': return v.defaults.resolution
      case 'mode': return v.defaults.mode
      case 'lip_sync_mode': return v.lipsync ? (v.defaults.lip_sync_mode ?? 'normal') : null
      case 'generate_audio': return v.generateAudio === 'unsupported' ? null : true
      default: return null
    }
  }
  const i = imageModel(model)
  if (i) {
    switch (field) {
      case 'aspect_ratio': return Array.isArray(request.image_urls) && request.image_urls.length > 0 ? 'auto' : '1:1'
      case 'resolution': return i.resolutions[0] ?? null
      case 'output_format': return 'png'
      default: return null
    }
  }
  return null
}

/** The request fields a route's check looks at that this request carries (set, not the default). */
export function carriedFields (model: string, request: Record<string, unknown>): string[] {
  const kind = request.kind === 'video' || request.kind === 'image' ? request.kind : null
  const fields = kind ? [...OPTION_FIELDS[kind], ...INPUT_FIELDS] : []
  return fields.filter((f) => {
    const x = request[f]
    if (x === null || x === undefined) return false
    if (Array.isArray(x) && x.length === 0) return false
    return x !== defaultOf(model, f, request)
  })
}

/** The request fields a mapping reads (roots of its `$.` paths); null: no mapping, every field is sent. */
export function fieldsRead (mapping: Record<string, InputValue> | undefined): Set<string> | null {
  if (mapping === undefined) return null
  const out = new Set<string>()
  const walk = (v: unknown): void => {
    if (typeof v === 'string') { if (v.startsWith('$.')) out.add(/^\$\.([A-Za-z0-9_]+)/.exec(v)?.[1] ?? ''); return }
    if (Array.isArray(v)) { v.forEach(walk); return }
    if (v !== null && typeof v === 'object') {
      const o = v as Record<string, unknown>
      if (typeof o.from === 'string') { walk(o.from); if (o.default !== undefined) walk(o.default); return }
      Object.values(o).forEach(walk)
    }
  }
  Object.values(mapping).forEach(walk)
  return out
}

/** Which request field an upstream field is filled from (its `$.` root), or null for a literal. */
function sourceOf (mapping: Record<string, InputValue> | undefined, upstreamField: string): string | null {
  if (mapping === undefined) return upstreamField
  if (!Object.prototype.hasOwnProperty.call(mapping, upstreamField)) return null
  const read = fieldsRead({ x: mapping[upstreamField] })
  return read && read.size > 0 ? [...read][0] : null
}

/** The input the schema judges: the mapped input without empty lists (an empty list is unset). */
function judged (input: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(input)) if (!(Array.isArray(v) && v.length === 0)) out[k] = v
  return out
}

/**
 * Every reason `spec` cannot serve `request` ([] = it can). `schema` is the route's upstream
 * schema (null for the simulated provider, which serves everything).
 */
export function unserved (spec: RouteSpec, schema: UpstreamSchema | null, model: string, request: Record<string, unknown>, prompt: string | null): Unserved[] {
  if (spec.provider === 'simulated' || schema === null) return []
  const out: Unserved[] = []
  const read = fieldsRead(spec.input)
  for (const f of carriedFields(model, request)) {
    if (read === null || read.has(f)) continue
    const listed = spec.serves?.[f]
    if (listed && listed.some(x => x === request[f])) continue
    out.push({ field: f, reason: `the route's upstream model takes no ${f}` })
  }
  const input = judged(mapInput(spec.input, request, prompt))
  for (const issue of checkInput(schema, input)) out.push(blame(spec, issue, request))
  return out
}

function blame (spec: RouteSpec, issue: InputIssue, request: Record<string, unknown>): Unserved {
  const src = issue.field ? sourceOf(spec.input, issue.field) : null
  const field = src ?? issue.field
  if (issue.keyword === 'required') return { field, reason: `the route's upstream model needs ${issue.field}` }
  const value = src !== null ? request[src] : undefined
  return { field, reason: `${issue.path.join('.')} ${issue.message}${value !== undefined ? ` (got ${JSON.stringify(value)})` : ''}` }
}

/**
 * The catalogue values of `field` the route can serve: values the mapping passes on and the
 * schema takes (probed on the model's default request), the route's `serves` list, and the
 * model's default when the route does not read the field. Judged on `field` alone: a probe
 * failing on another field (a missing image on an image-to-video route) does not count here.
 */
export function servedValues (
  spec: RouteSpec, schema: UpstreamSchema | null, model: string, field: string, values: readonly unknown[], base: Record<string, unknown>
): unknown[] {
  if (spec.provider === 'simulated' || schema === null) return [...values]
  return values.filter((v) => {
    const probe = { ...base, [field]: v }
    return !unserved(spec, schema, model, probe, typeof probe.prompt === 'string' ? probe.prompt : 'probe').some(u => u.field === field)
  })
}

/** The schema of a route (null for simulated). Throws nothing: a missing file was a boot error. */
export function schemaOfRoute (spec: RouteSpec, dir?: string): UpstreamSchema | null {
  if (spec.provider === 'simulated') return null
  return loadUpstreamSchema(spec.provider, spec.model, dir)
}

/** The values the catalogue allows for an option of a model (docs/api.md "Jobs"). */
export function catalogueValues (model: string, field: string): readonly unknown[] {
  const v = videoModel(model)
  if (v) {
    switch (field) {
      case 'aspect_ratio': return v.aspectRatios
      case 'duration': return v.durations
      case 'resolution': return v.resolutions
      case 'mode': return v.modes
      case 'lip_sync_mode': return v.lipsync ? LIP_SYNC_MODES : []
      default: return []
    }
  }
  const i = imageModel(model)
  if (i) {
    switch (field) {
      case 'aspect_ratio': return i.aspectRatios
      case 'resolution': return i.resolutions
      case 'output_format': return i.outputFormats
      default: return []
    }
  }
  return []
}

/** What capability routing needs of a route (registry.ts Route). */
export interface CapableRoute {
  spec: RouteSpec
  unserved (request: Record<string, unknown>, prompt: string | null): Unserved[]
  upstreamSchema (): UpstreamSchema | null
}

/**
 * The 422 UNSUPPORTED_OPTION for a request no route serves (docs/providers.md): `param` is the
 * field every route fails on (an option before an input, else the first route's first reason);
 * the message lists the values of that option that can run, given the rest of the request.
 */
export function unsupportedOption (model: string, routes: readonly CapableRoute[], request: Record<string, unknown>, prompt: string | null): ApiError {
  const per = routes.map(r => r.unserved(request, prompt))
  const options = OPTION_FIELDS[request.kind === 'image' ? 'image' : 'video']
  const everywhere = (f: string): boolean => per.every(list => list.some(u => u.field === f))
  const candidates = per.flat().map(u => u.field)
  // The field every route fails on; else an option (the client can change it, not its media).
  const field = candidates.find(f => options.includes(f) && everywhere(f)) ?? candidates.find(everywhere) ??
    candidates.find(f => options.includes(f)) ?? candidates[0] ?? 'model'
  const value = request[field]
  const shown = value === undefined || value === null ? '' : ` ${JSON.stringify(value)}`
  const values = catalogueValues(model, field)
  let can = ''
  if (values.length > 0) {
    // Values with which some route serves the whole request as it is otherwise.
    const list = values.filter(x => routes.some(r => r.unserved({ ...request, [field]: x }, prompt).length === 0))
    can = list.length > 0 ? `; values that can run: ${list.map(x => String(x)).join(', ')}` : `; no value of ${field} can run with the rest of this request`
  } else {
    can = `; send the request without ${field}`
  }
  // In our vocabulary only: upstream field names and spellings stay in the operator's view (docs/providers.md "Capabilities").
  return new ApiError('UNSUPPORTED_OPTION', `${model} cannot run ${field}${shown} with the providers it is routed to${can}. Nothing was charged`, { param: field })
}

/** The request a client gets with only a prompt: the model's defaults, no media. */
export function baseRequest (model: string, kind: 'video' | 'image'): Record<string, unknown> {
  const r: Record<string, unknown> = { kind, model, prompt: 'probe' }
  if (kind === 'image') r.image_urls = []
  for (const f of OPTION_FIELDS[kind]) r[f] = defaultOf(model, f, r)
  if (kind === 'video') r.generate_audio = defaultOf(model, 'generate_audio', r)
  return r
}
