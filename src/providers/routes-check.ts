/**
 * `npm run admin -- routes check [--online]` (docs/providers.md "routes check"): what each
 * route of a routing file can serve, and whether the upstream schemas shipped with the project
 * still match the providers' live ones.
 * - The matrix: per catalogue model, per option value the catalogue allows, per route: served,
 *   or why not (src/providers/capabilities.ts decides, exactly as capability routing does).
 * - Drift (`--online`): each upstream model's current input schema, fetched from
 *   fal: the endpoint's OpenAPI document (`https://fal.ai/api/openapi/queue/openapi.json?endpoint_id=<id>`,
 *      public, the "Schema" link of each fal model page; FAL_OPENAPI_URL overrides the base);
 *   Replicate: `GET {REPLICATE_API_URL}/v1/models/{owner}/{name}`, `latest_version.openapi_schema`
 *      (components.schemas.Input; REPLICATE_API_TOKEN);
 *   Kie publishes no machine-readable schema: its models are reported as not checked online;
 *   compared field by field with the shipped copy: fields added or removed, enum values added
 *   or removed, type changes, required changes.
 */
import { request } from 'undici'
import { imageModel, videoModel } from '../catalog/models.js'
import { baseRequest, catalogueValues, OPTION_FIELDS, schemaOfRoute, unserved } from './capabilities.js'
import type { RouteSpec, RoutingTable } from './routing.js'
import { schemaModelId, type JsonSchema, type UpstreamSchema } from './upstream-schemas.js'
import type { ProviderJson } from '../net/json-client.js'

/** One cell of the matrix: a route's verdict on one option value. */
export interface MatrixCell { route: number; served: boolean; why?: string }
export interface MatrixRow { model: string; field: string; value: unknown; routes: MatrixCell[]; servedBySome: boolean }

/** A route as the report names it. */
export function routeLabel (spec: RouteSpec, i: number): string {
  return `#${i} ${spec.provider} ${spec.model}`
}

/**
 * Model x option value x route. Each value is judged on the model's default request with only
 * that option changed, as GET /v1/models judges it; a route "serves" the value when nothing
 * about that option stops it (a reason about another field, such as an image an
 * image-to-video route needs, is not held against the value).
 */
export function routeMatrix (table: RoutingTable): MatrixRow[] {
  const rows: MatrixRow[] = []
  for (const [model, specs] of Object.entries(table.routes)) {
    const kind = videoModel(model) ? 'video' : imageModel(model) ? 'image' : null
    const schemas = specs.map(s => schemaOfRoute(s))
    if (kind === null) {
      // Audio models have no option values: one row saying whether each route takes the default request.
      const req = { kind: 'audio', model, prompt: 'probe', text: 'probe' }
      const cells = specs.map((s, i) => cellOf(unserved(s, schemas[i], model, req, 'probe'), i))
      rows.push({ model, field: '(defaults)', value: null, routes: cells, servedBySome: cells.some(c => c.served) })
      continue
    }
    const base = baseRequest(model, kind)
    for (const field of OPTION_FIELDS[kind]) {
      for (const value of catalogueValues(model, field)) {
        const probe = { ...base, [field]: value }
        const cells = specs.map((s, i) => cellOf(unserved(s, schemas[i], model, probe, 'probe').filter(u => u.field === field), i))
        rows.push({ model, field, value, routes: cells, servedBySome: cells.some(c => c.served) })
      }
    }
  }
  return rows
}

function cellOf (reasons: Array<{ field: string; reason: string }>, i: number): MatrixCell {
  return reasons.length === 0 ? { route: i, served: true } : { route: i, served: false, why: reasons.map(r => r.reason).join('; ') }
}

/** The matrix as text: one block per model, one line per value, one column per route. */
export function formatMatrix (table: RoutingTable, rows: MatrixRow[]): string {
  const out: string[] = []
  let model = ''
  for (const r of rows) {
    if (r.model !== model) {
      model = r.model
      out.push('', `${model}`)
      table.routes[model].forEach((s, i) => out.push(`  route ${routeLabel(s, i)}`))
    }
    const name = r.field === '(defaults)' ? '(default request)' : `${r.field}=${String(r.value)}`
    const cells = r.routes.map(c => `#${c.route} ${c.served ? 'served' : `no (${c.why})`}`)
    out.push(`  ${r.servedBySome ? ' ' : '!'} ${name.padEnd(24)} ${cells.join(' | ')}`)
  }
  const refused = rows.filter(r => !r.servedBySome).length
  out.push('', `${rows.length} option values, ${refused} served by no route (marked !: answered 422 UNSUPPORTED_OPTION up front, nothing charged)`)
  return out.join('\n').replace(/^\n/, '') + '\n'
}

/** A property as drift compares it. */
export interface FieldShape { type: string | null; enum: unknown[] | null }
export interface InputShape { fields: Record<string, FieldShape>; required: string[] }

/**
 * Flattens an input schema for comparison: `$ref` resolved in `components`, `allOf` merged
 * (Replicate wraps enums in one), `anyOf`/`oneOf` with `null` unwrapped (fal's optional fields).
 */
export function shapeOf (schema: JsonSchema, components: Record<string, JsonSchema> = {}): InputShape {
  const fields: Record<string, FieldShape> = {}
  for (const [name, raw] of Object.entries(schema.properties ?? {})) fields[name] = fieldShape(raw, components, 0)
  return { fields, required: [...(schema.required ?? [])].sort() }
}

function resolve (s: JsonSchema, components: Record<string, JsonSchema>, depth: number): JsonSchema {
  if (depth > 8 || s === null || typeof s !== 'object') return {}
  let out: JsonSchema = { ...s }
  if (typeof s.$ref === 'string') {
    const name = s.$ref.split('/').pop() ?? ''
    out = { ...resolve(components[name] ?? {}, components, depth + 1), ...out }
    delete out.$ref
  }
  if (Array.isArray(s.allOf)) {
    for (const part of s.allOf as JsonSchema[]) out = { ...resolve(part, components, depth + 1), ...out }
    delete out.allOf
  }
  return out
}

function fieldShape (raw: JsonSchema, components: Record<string, JsonSchema>, depth: number): FieldShape {
  const s = resolve(raw, components, depth)
  const variants = (s.anyOf ?? s.oneOf) as JsonSchema[] | undefined
  if (Array.isArray(variants)) {
    const real = variants.map(v => resolve(v, components, depth + 1)).filter(v => v.type !== 'null')
    const enums = real.flatMap(v => Array.isArray(v.enum) ? v.enum : [])
    const type = real.map(v => typeOf(v)).find(x => x !== null) ?? null
    return { type, enum: enums.length ? enums : (Array.isArray(s.enum) ? s.enum : null) }
  }
  return { type: typeOf(s), enum: Array.isArray(s.enum) ? s.enum : null }
}

function typeOf (s: JsonSchema): string | null {
  if (Array.isArray(s.type)) return s.type.filter(t => t !== 'null').join('|') || null
  if (typeof s.type === 'string') return s.type
  if (Array.isArray(s.enum) && s.enum.length) return typeof s.enum[0] === 'number' ? (Number.isInteger(s.enum[0]) ? 'integer' : 'number') : typeof s.enum[0]
  return null
}

/** One difference between the shipped copy and the live schema. */
export interface Drift { field: string; change: 'added' | 'removed' | 'enum' | 'type' | 'required'; detail: string }

/** Differences from `shipped` to `live` (both flattened). */
export function driftOf (shipped: InputShape, live: InputShape): Drift[] {
  const out: Drift[] = []
  for (const f of Object.keys(live.fields)) if (!(f in shipped.fields)) out.push({ field: f, change: 'added', detail: `new upstream field ${f}${live.required.includes(f) ? ' (required)' : ''}` })
  for (const f of Object.keys(shipped.fields)) if (!(f in live.fields)) out.push({ field: f, change: 'removed', detail: `field ${f} is no longer in the upstream schema` })
  for (const [f, s] of Object.entries(shipped.fields)) {
    const l = live.fields[f]
    if (!l) continue
    if (s.enum !== null || l.enum !== null) {
      const a = (s.enum ?? []).map(v => JSON.stringify(v))
      const b = (l.enum ?? []).map(v => JSON.stringify(v))
      const added = b.filter(x => !a.includes(x))
      const removed = a.filter(x => !b.includes(x))
      if (s.enum === null) out.push({ field: f, change: 'enum', detail: `${f} now takes only ${b.join(', ')}` })
      else if (l.enum === null) out.push({ field: f, change: 'enum', detail: `${f} is no longer limited to ${a.join(', ')}` })
      else if (added.length || removed.length) out.push({ field: f, change: 'enum', detail: `${f} values${added.length ? ` added ${added.join(', ')}` : ''}${removed.length ? ` removed ${removed.join(', ')}` : ''}` })
    }
    if (s.type !== null && l.type !== null && s.type !== l.type) out.push({ field: f, change: 'type', detail: `${f} type ${s.type} -> ${l.type}` })
  }
  for (const f of live.required) if (!shipped.required.includes(f) && f in shipped.fields) out.push({ field: f, change: 'required', detail: `${f} is now required` })
  for (const f of shipped.required) if (!live.required.includes(f) && f in live.fields) out.push({ field: f, change: 'required', detail: `${f} is no longer required` })
  return out
}

/** Where the live schemas are fetched (env overrides for private mirrors and tests). */
export interface OnlineSettings {
  falOpenApiUrl: string
  replicateApiUrl: string
  replicateToken: string | undefined
  timeoutMs: number
}

export function onlineSettings (env: Record<string, string | undefined>): OnlineSettings {
  return {
    falOpenApiUrl: env.FAL_OPENAPI_URL || 'https://fal.ai/api/openapi/queue/openapi.json',
    replicateApiUrl: (env.REPLICATE_API_URL || 'https://api.replicate.com').replace(/\/+$/, ''),
    replicateToken: env.REPLICATE_API_TOKEN || undefined,
    timeoutMs: 20_000,
  }
}

/** The live input schema of one upstream model, flattened; or why it could not be had. */
export type LiveShape = { shape: InputShape; source: string } | { skipped: string } | { error: string }

export async function fetchLiveShape (provider: string, model: string, s: OnlineSettings): Promise<LiveShape> {
  if (provider === 'kie') return { skipped: 'Kie publishes no machine-readable input schema; compare with its docs by hand (docs/upstream-models.md)' }
  if (provider === 'fal') {
    const url = new URL(s.falOpenApiUrl)
    url.searchParams.set('endpoint_id', model)
    const doc = await getJson(url.toString(), {}, s.timeoutMs)
    if ('error' in doc) return doc
    const input = falInput(doc.json)
    if (!input) return { error: `${url}: no POST request body schema in the OpenAPI document (unknown endpoint?)` }
    return { shape: shapeOf(input, doc.json.components?.schemas ?? {}), source: url.toString() }
  }
  if (provider === 'replicate') {
    if (!s.replicateToken) return { skipped: 'REPLICATE_API_TOKEN is not set (the models API needs it)' }
    const id = schemaModelId('replicate', model)
    const [owner, name] = id.split('/')
    const url = `${s.replicateApiUrl}/v1/models/${encodeURIComponent(owner)}/${encodeURIComponent(name ?? '')}`
    const doc = await getJson(url, { authorization: `Bearer ${s.replicateToken}` }, s.timeoutMs)
    if ('error' in doc) return doc
    const openapi = doc.json?.latest_version?.openapi_schema
    const input = openapi?.components?.schemas?.Input
    if (!input || typeof input !== 'object') return { error: `${url}: no latest_version.openapi_schema.components.schemas.Input` }
    return { shape: shapeOf(input, openapi.components.schemas), source: `${url} (version ${doc.json.latest_version.id ?? '?'})` }
  }
  return { skipped: `${provider} has no upstream schema` }
}

/** The input schema of a fal OpenAPI document: the POST request body's `$ref`, else a schema named *Input. */
function falInput (doc: ProviderJson): JsonSchema | null {
  const schemas = doc?.components?.schemas ?? {}
  for (const item of Object.values(doc?.paths ?? {}) as ProviderJson[]) {
    const body = item?.post?.requestBody?.content?.['application/json']?.schema
    if (!body) continue
    if (typeof body.$ref === 'string') { const s = schemas[body.$ref.split('/').pop()]; if (s) return s }
    if (body.properties) return body
  }
  for (const [name, s] of Object.entries(schemas)) if (name.endsWith('Input')) return s as JsonSchema
  return null
}

async function getJson (url: string, headers: Record<string, string>, timeoutMs: number): Promise<{ json: ProviderJson } | { error: string }> {
  try {
    const res = await request(url, { method: 'GET', headers: { accept: 'application/json', ...headers }, headersTimeout: timeoutMs, bodyTimeout: timeoutMs })
    const text = await res.body.text()
    if (res.statusCode !== 200) return { error: `${url}: HTTP ${res.statusCode}` }
    try { return { json: JSON.parse(text) } } catch { return { error: `${url}: not JSON` } }
  } catch (err) {
    return { error: `${url}: ${(err as Error).message}` }
  }
}

/** Drift of one upstream model (each upstream model is checked once, whatever routes name it). */
export interface DriftReport {
  provider: string
  model: string
  /** The routes that use it (`model#i`). */
  routes: string[]
  status: 'same' | 'drift' | 'skipped' | 'error'
  drift: Drift[]
  note?: string
  source?: string
}

/** Fetches and compares every upstream model the routing file names. */
export async function checkOnline (table: RoutingTable, settings: OnlineSettings): Promise<DriftReport[]> {
  const byModel = new Map<string, { provider: string; model: string; routes: string[]; schema: UpstreamSchema | null }>()
  for (const [model, specs] of Object.entries(table.routes)) {
    specs.forEach((spec, i) => {
      if (spec.provider === 'simulated') return
      const k = `${spec.provider} ${schemaModelId(spec.provider, spec.model)}`
      const e = byModel.get(k) ?? { provider: spec.provider, model: spec.model, routes: [], schema: schemaOfRoute(spec) }
      e.routes.push(`${model}#${i}`)
      byModel.set(k, e)
    })
  }
  const out: DriftReport[] = []
  for (const e of byModel.values()) {
    const live = await fetchLiveShape(e.provider, e.model, settings)
    const base = { provider: e.provider, model: e.model, routes: e.routes }
    if ('skipped' in live) { out.push({ ...base, status: 'skipped', drift: [], note: live.skipped }); continue }
    if ('error' in live) { out.push({ ...base, status: 'error', drift: [], note: live.error }); continue }
    const shipped = shapeOf(e.schema?.doc.input ?? {})
    const drift = driftOf(shipped, live.shape)
    const note = e.schema?.doc.verified === false ? 'the shipped copy is marked unverified' : undefined
    out.push({ ...base, status: drift.length ? 'drift' : 'same', drift, source: live.source, ...(note ? { note } : {}) })
  }
  return out
}

export function formatDrift (reports: DriftReport[]): string {
  const out: string[] = ['', 'Upstream schemas against the live ones:']
  for (const r of reports) {
    const head = `  ${r.status === 'same' ? 'same   ' : r.status === 'drift' ? 'DRIFT  ' : r.status === 'error' ? 'ERROR  ' : 'skipped'} ${r.provider} ${r.model} (${r.routes.join(', ')})`
    out.push(head)
    for (const d of r.drift) out.push(`      ${d.change.padEnd(8)} ${d.detail}`)
    if (r.note) out.push(`      ${r.note}`)
  }
  const n = (s: DriftReport['status']) => reports.filter(r => r.status === s).length
  out.push('', `${reports.length} upstream models: ${n('same')} same, ${n('drift')} drifted, ${n('error')} not reachable, ${n('skipped')} not checked online`)
  return out.join('\n') + '\n'
}
