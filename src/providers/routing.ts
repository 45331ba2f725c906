import { readFileSync } from 'node:fs'
import { relative } from 'node:path'
import { AUDIO_MODEL_IDS, IMAGE_MODEL_IDS, VIDEO_MODEL_IDS } from '../catalog/index.js'
import { checkField, DEFAULT_SCHEMAS_DIR, loadUpstreamSchema, schemaFile } from './upstream-schemas.js'
import { parseProviderSettings, type ProviderSettings } from './budget.js'

/**
 * The routing file (docs/providers.md "Routing"): PROVIDERS_FILE maps a catalogue
 * model id to an ordered list of routes. Parsed and validated once at boot; every mistake is a
 * boot error naming the model and route. Pure: no I/O besides reading the file.
 *
 * ```json
 * {"routes": {"veo3-fast": [
 *   {"provider": "fal", "model": "fal-ai/veo3/fast", "max_concurrent": 4,
 *    "input": {"prompt": "$.prompt", "aspect_ratio": "$.aspect_ratio", "duration": {"from": "$.duration", "as": "string", "suffix": "s"}}},
 *   {"provider": "replicate", "model": "google/veo-3-fast"}]}}
 * ```
 */

export const PROVIDER_NAMES = ['simulated', 'fal', 'replicate', 'kie'] as const
export type ProviderName = typeof PROVIDER_NAMES[number]

/** The credential each real provider needs (docs/providers.md "Real providers"). */
export const CREDENTIAL_OF: Record<Exclude<ProviderName, 'simulated'>, string> = {
  fal: 'FAL_KEY',
  replicate: 'REPLICATE_API_TOKEN',
  kie: 'KIE_API_KEY',
}

/**
 * One value of a route's input mapping: a literal (copied as is), a `"$.field"` path into our
 * normalised request (absent or null: the key is left out), or an object
 * `{from, as?, map?, default?, prefix?, suffix?}` that converts the field.
 */
export type InputValue = string | number | boolean | null | InputValue[] | { [k: string]: InputValue } | FieldRef
export interface FieldRef {
  from: string
  /** Convert to this type (`"8"` -> 8 with `number`). */
  as?: 'string' | 'number' | 'integer' | 'boolean'
  /** Value table applied first (`{"16:9": "landscape"}`); values not listed pass through. */
  map?: Record<string, InputValue>
  /** Used when the field is absent or null. */
  default?: InputValue
  prefix?: string
  suffix?: string
}

export interface RouteSpec {
  provider: ProviderName
  /** Upstream model or app id (fal app id, Replicate owner/name or version, Kie model). */
  model: string
  /** Submissions in flight on this route at most (undefined: no cap). */
  max_concurrent?: number
  /** Upstream input mapping; undefined: our request's fields as they are (see defaultInput). */
  input?: Record<string, InputValue>
  /** Seconds a job may stay with this provider before our deadline (default max(4 x estimate, 30 min)). */
  deadline_s?: number
  /**
   * Option values the upstream meets without a field (docs/providers.md "Capabilities"):
   * `{"aspect_ratio": ["adaptive"]}` on an image-to-video endpoint whose output follows the frame.
   */
  serves?: Record<string, Array<string | number | boolean>>
}

export interface RoutingTable {
  routes: Record<string, RouteSpec[]>
  /** Per-provider limits for our account: request budget and concurrency (src/providers/budget.ts). */
  providers?: Record<string, ProviderSettings>
}

export const CATALOGUE_MODEL_IDS: readonly string[] = [...VIDEO_MODEL_IDS, ...IMAGE_MODEL_IDS, ...AUDIO_MODEL_IDS]

/** Fields of our normalised request that are ours, never sent upstream by the default mapping. */
const INTERNAL_FIELDS = new Set(['kind', 'model', 'credits', 'estimated_seconds', 'webhook_url', 'webhook_secret', 'character_asset_ids', 'voice_asset_ids', 'job_id'])

const ROUTE_KEYS = new Set(['provider', 'model', 'max_concurrent', 'input', 'deadline_s', 'serves'])
const REF_KEYS = new Set(['from', 'as', 'map', 'default', 'prefix', 'suffix'])

/** Parses and validates a routing document; throws an Error naming the first mistake. */
export function parseRouting (doc: unknown, env: Record<string, string | undefined>, where = 'PROVIDERS_FILE'): RoutingTable {
  if (!isObject(doc)) throw new Error(`${where}: must be a JSON object {"routes": {...}}`)
  for (const k of Object.keys(doc)) if (k !== 'routes' && k !== 'providers' && !k.startsWith('$') && k !== 'comment') throw new Error(`${where}: unknown key ${JSON.stringify(k)} (expected "routes" or "providers")`)
  const routes = doc.routes
  if (!isObject(routes)) throw new Error(`${where}: "routes" must be an object of model id -> [route, ...]`)
  const out: Record<string, RouteSpec[]> = {}
  for (const [model, list] of Object.entries(routes)) {
    if (!CATALOGUE_MODEL_IDS.includes(model)) throw new Error(`${where}: unknown model id ${JSON.stringify(model)} (catalogue: ${CATALOGUE_MODEL_IDS.join(', ')})`)
    if (!Array.isArray(list) || list.length === 0) throw new Error(`${where}: routes.${model} must be a non-empty array of routes`)
    out[model] = list.map((r, i) => parseRoute(r, `${where}: routes.${model}[${i}]`, env))
  }
  if (doc.providers === undefined) return { routes: out }
  return { routes: out, providers: parseProviderSettings(doc.providers, where) }
}

function parseRoute (r: unknown, at: string, env: Record<string, string | undefined>): RouteSpec {
  if (!isObject(r)) throw new Error(`${at} must be an object {provider, model, max_concurrent?, deadline_s?, input?}`)
  for (const k of Object.keys(r)) if (!ROUTE_KEYS.has(k)) throw new Error(`${at}: unknown key ${JSON.stringify(k)}`)
  const provider = r.provider
  if (typeof provider !== 'string' || !(PROVIDER_NAMES as readonly string[]).includes(provider)) {
    throw new Error(`${at}: unknown provider ${JSON.stringify(provider)} (one of ${PROVIDER_NAMES.join(', ')})`)
  }
  const p = provider as ProviderName
  if (p !== 'simulated' && !env[CREDENTIAL_OF[p]]) throw new Error(`${at}: provider ${p} needs ${CREDENTIAL_OF[p]} in the environment`)
  const model = r.model ?? (p === 'simulated' ? 'simulated' : undefined)
  if (typeof model !== 'string' || model.trim() === '') throw new Error(`${at}: "model" (the upstream model id) must be a non-empty string`)
  const spec: RouteSpec = { provider: p, model }
  if (r.max_concurrent !== undefined) {
    if (typeof r.max_concurrent !== 'number' || !Number.isInteger(r.max_concurrent) || r.max_concurrent < 1) throw new Error(`${at}: max_concurrent must be an integer >= 1`)
    spec.max_concurrent = r.max_concurrent
  }
  if (r.deadline_s !== undefined) {
    if (typeof r.deadline_s !== 'number' || !Number.isFinite(r.deadline_s) || r.deadline_s <= 0) throw new Error(`${at}: deadline_s must be a positive number of seconds`)
    spec.deadline_s = r.deadline_s
  }
  if (r.input !== undefined) {
    if (!isObject(r.input)) throw new Error(`${at}: input must be an object of upstream field -> value`)
    for (const [k, v] of Object.entries(r.input)) checkValue(v, `${at}.input.${k}`)
    spec.input = r.input as Record<string, InputValue>
  }
  if (r.serves !== undefined) {
    if (!isObject(r.serves)) throw new Error(`${at}: serves must be an object of option -> [values the upstream meets without a field]`)
    for (const [k, v] of Object.entries(r.serves)) {
      if (!Array.isArray(v) || v.length === 0 || !v.every(x => typeof x === 'string' || typeof x === 'number' || typeof x === 'boolean')) {
        throw new Error(`${at}: serves.${k} must be a non-empty array of option values`)
      }
    }
    spec.serves = r.serves as Record<string, Array<string | number | boolean>>
  }
  return spec
}

function checkValue (v: unknown, at: string): void {
  if (typeof v === 'string') { if (v.startsWith('$') && !/^\$\.[A-Za-z0-9_]+(\.[A-Za-z0-9_]+|\[\d+\])*$/.test(v)) throw new Error(`${at}: bad path ${JSON.stringify(v)} (expected "$.field", "$.field.sub" or "$.list[0]")`); return }
  if (v === null || typeof v === 'number' || typeof v === 'boolean') return
  if (Array.isArray(v)) { v.forEach((x, i) => checkValue(x, `${at}[${i}]`)); return }
  if (isObject(v)) {
    if ('from' in v) {
      for (const k of Object.keys(v)) if (!REF_KEYS.has(k)) throw new Error(`${at}: unknown key ${JSON.stringify(k)} in a field reference`)
      if (typeof v.from !== 'string') throw new Error(`${at}.from must be a "$.field" path`)
      checkValue(v.from.startsWith('$') ? v.from : '$bad', `${at}.from`)
      if (v.as !== undefined && !['string', 'number', 'integer', 'boolean'].includes(v.as as string)) throw new Error(`${at}.as must be string, number, integer or boolean`)
      if (v.map !== undefined && !isObject(v.map)) throw new Error(`${at}.map must be an object`)
      for (const k of ['prefix', 'suffix']) if (v[k] !== undefined && typeof v[k] !== 'string') throw new Error(`${at}.${k} must be a string`)
      return
    }
    for (const [k, x] of Object.entries(v)) checkValue(x, `${at}.${k}`)
    return
  }
  throw new Error(`${at}: unsupported value`)
}

/** Reads and validates PROVIDERS_FILE; null when unset (everything simulated). */
export function loadRouting (file: string | undefined, env: Record<string, string | undefined>): RoutingTable | null {
  if (!file) return null
  let text: string
  try { text = readFileSync(file, 'utf8') } catch (err) { throw new Error(`PROVIDERS_FILE: cannot read ${file}: ${(err as Error).message}`) }
  let doc: unknown
  try { doc = JSON.parse(text) } catch (err) { throw new Error(`PROVIDERS_FILE: ${file} is not valid JSON: ${(err as Error).message}`) }
  const table = parseRouting(doc, env, `PROVIDERS_FILE ${file}`)
  checkRoutesAgainstSchemas(table, `PROVIDERS_FILE ${file}`)
  return table
}

/** Fields of our normalised requests (src/catalog/validate.ts) a route without a mapping may send. */
const REQUEST_FIELDS = new Set([
  'prompt', 'aspect_ratio', 'duration', 'resolution', 'mode', 'image_url', 'last_frame_url', 'reference_image_urls',
  'reference_video_urls', 'reference_audio_urls', 'generate_audio', 'sound', 'multi_shots', 'multi_prompt', 'kling_elements',
  'audio_url', 'audio_duration', 'lip_sync_mode', 'output_format', 'image_urls', 'text', 'voice_id', 'voice_name', 'title',
  'style', 'instrumental', 'lyrics',
])

/**
 * The boot check of every route against its upstream schema (docs/providers.md "Boot check"): the schema file must exist; a mapped field the
 * schema lacks (when it refuses unknown fields), a required field the mapping never fills, or a
 * literal (or value-table entry) the field's type or enum refuses stops the boot with one
 * message naming model, route index, provider/upstream model and field.
 */
export function checkRoutesAgainstSchemas (table: RoutingTable, where = 'PROVIDERS_FILE', dir = DEFAULT_SCHEMAS_DIR): void {
  for (const [model, list] of Object.entries(table.routes)) {
    list.forEach((r, i) => {
      if (r.provider === 'simulated') return
      const at = `${where}: routes.${model}[${i}] (${r.provider} ${r.model})`
      let schema
      try { schema = loadUpstreamSchema(r.provider, r.model, dir) } catch (err) { throw new Error(`${at}: ${(err as Error).message}`) }
      if (!schema) {
        let file: string
        try { file = relative(process.cwd(), schemaFile(r.provider, r.model, dir)) } catch { file = `config/upstream-schemas/${r.provider}/<model>.json` }
        throw new Error(`${at}: no upstream schema for this model; put its input schema, with the public source it was read from, in ${file} (docs/upstream-models.md)`)
      }
      if (schema.open) return
      const input = schema.doc.input
      const props = input.properties ?? {}
      const required = input.required ?? []
      if (r.input === undefined) {
        for (const f of required) if (!REQUEST_FIELDS.has(f)) throw new Error(`${at}: field ${f}: the upstream schema requires it and the route has no input mapping to fill it`)
        return
      }
      for (const [k, v] of Object.entries(r.input)) {
        if (!Object.prototype.hasOwnProperty.call(props, k)) {
          if (input.additionalProperties === false) throw new Error(`${at}: field ${k}: mapped, but the upstream schema has no such field and refuses unknown fields`)
          continue
        }
        for (const lit of literalsOf(v)) {
          const issues = checkField(schema, k, lit)
          if (issues.length) throw new Error(`${at}: field ${k}: the literal ${JSON.stringify(lit)} ${issues[0].message}`)
        }
      }
      for (const f of required) if (!Object.prototype.hasOwnProperty.call(r.input, f)) throw new Error(`${at}: field ${f}: the upstream schema requires it and the input mapping never fills it`)
    })
  }
}

/** The literal values a mapping entry can send: a plain literal, or a value table's entries. */
function literalsOf (v: InputValue): unknown[] {
  if (v === null || typeof v === 'number' || typeof v === 'boolean') return [v]
  if (typeof v === 'string') return v.startsWith('$.') ? [] : [v]
  if (Array.isArray(v)) return []
  if (typeof (v as FieldRef).from === 'string') {
    const ref = v as FieldRef
    const out: unknown[] = []
    // Table entries go through `as`, prefix and suffix (convert); a default is sent as it is.
    for (const x of ref.map ? Object.values(ref.map) : []) {
      if (x !== null && typeof x === 'object') continue
      out.push(convert({ ...ref, map: undefined, default: undefined, from: '$.x' }, { x }))
    }
    if (ref.default !== undefined) out.push(...literalsOf(ref.default))
    return out
  }
  return []
}

/** The upstream input of one job: the route's mapping applied to our request (plus prompt). */
export function mapInput (mapping: Record<string, InputValue> | undefined, request: Record<string, unknown>, prompt: string | null): Record<string, unknown> {
  const src: Record<string, unknown> = { ...request, prompt: prompt ?? request.prompt ?? null }
  if (mapping === undefined) return defaultInput(src)
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(mapping)) {
    const x = resolve(v, src)
    if (x !== undefined) out[k] = x
  }
  return out
}

/** Without a mapping: every field of our request that is set, minus our own bookkeeping. */
export function defaultInput (src: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(src)) {
    if (INTERNAL_FIELDS.has(k) || v === null || v === undefined) continue
    if (Array.isArray(v) && v.length === 0) continue
    out[k] = v
  }
  return out
}

function resolve (v: InputValue, src: Record<string, unknown>): unknown {
  if (typeof v === 'string') return v.startsWith('$.') ? nullToUndef(lookup(src, v)) : v
  if (v === null || typeof v !== 'object') return v
  if (Array.isArray(v)) return v.map(x => resolve(x, src)).filter(x => x !== undefined)
  if (typeof (v as FieldRef).from === 'string') return convert(v as FieldRef, src)
  const o: Record<string, unknown> = {}
  for (const [k, x] of Object.entries(v)) { const r = resolve(x as InputValue, src); if (r !== undefined) o[k] = r }
  return o
}

function convert (ref: FieldRef, src: Record<string, unknown>): unknown {
  let x = nullToUndef(lookup(src, ref.from))
  if (x === undefined) return ref.default === undefined ? undefined : resolve(ref.default, src)
  if (ref.map && (typeof x === 'string' || typeof x === 'number' || typeof x === 'boolean') && Object.prototype.hasOwnProperty.call(ref.map, String(x))) x = ref.map[String(x)]
  switch (ref.as) {
    case 'string': x = String(x); break
    case 'number': x = Number(x); break
    case 'integer': x = Math.round(Number(x)); break
    case 'boolean': x = x === true || x === 'true' || x === 1 || x === '1'; break
  }
  if (typeof x === 'number' && !Number.isFinite(x)) return ref.default === undefined ? undefined : resolve(ref.default, src)
  if (ref.prefix !== undefined || ref.suffix !== undefined) x = `${ref.prefix ?? ''}${String(x)}${ref.suffix ?? ''}`
  return x
}

function lookup (src: Record<string, unknown>, path: string): unknown {
  let cur: unknown = src
  for (const part of path.slice(2).split(/\.|(?=\[)/)) {
    if (cur === null || cur === undefined) return undefined
    const idx = /^\[(\d+)\]$/.exec(part)
    if (idx) { cur = Array.isArray(cur) ? cur[Number(idx[1])] : undefined; continue }
    if (typeof cur !== 'object' || !Object.prototype.hasOwnProperty.call(cur, part)) return undefined
    cur = (cur as Record<string, unknown>)[part]
  }
  return cur
}

function nullToUndef (x: unknown): unknown { return x === null ? undefined : x }

function isObject (v: unknown): v is Record<string, unknown> { return v !== null && typeof v === 'object' && !Array.isArray(v) }
