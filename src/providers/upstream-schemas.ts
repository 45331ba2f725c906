/**
 * The upstream models' input schemas that ship with the project (config/upstream-schemas,
 * docs/upstream-models.md, docs/providers.md): one JSON file per upstream model,
 * `<provider>/<model id>.json` (the id's slashes are folders; a Replicate `owner/name:version`
 * uses the `owner/name` file). The boot check and capability-aware routing read them here, and
 * so do the contract stubs in test/fixtures, so the service and its tests judge an input by the
 * same document. Files are read once and compiled with Ajv (JSON Schema 2020-12).
 */
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js'
import addFormatsModule from 'ajv-formats'

// ajv-formats is CommonJS; under NodeNext its default import is the module object's default.
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default

/** The project's schema folder (dist/src/providers -> the repository root). */
export const DEFAULT_SCHEMAS_DIR = fileURLToPath(new URL('../../../config/upstream-schemas/', import.meta.url))

/** A JSON Schema object, as far as the capability check reads one. */
export interface JsonSchema {
  type?: string | string[]
  enum?: unknown[]
  properties?: Record<string, JsonSchema>
  required?: string[]
  additionalProperties?: boolean | JsonSchema
  [k: string]: unknown
}

/** One schema file (docs/upstream-models.md "Upstream models"). */
export interface UpstreamSchemaDoc {
  provider: string
  model: string
  /** False: no public source for the model's own input schema was found (see `note`). */
  verified: boolean
  sources: string[]
  api?: string
  note?: string
  input: JsonSchema
  output?: unknown
}

/** A loaded schema: the document and its compiled input validator. */
export interface UpstreamSchema {
  doc: UpstreamSchemaDoc
  file: string
  /** Validates an upstream input; `errors` holds Ajv's errors after a failure. */
  validate: ValidateFunction
  /** Unverified and without properties: nothing is known, any input is taken. */
  open: boolean
}

/** One reason an input is refused, provider-neutral (the stubs dress it in each provider's shape). */
export interface InputIssue {
  /** The upstream field (top level) or '' for the whole body. */
  field: string
  /** Path below the body, e.g. ['duration'] or ['image_urls', '0']. */
  path: string[]
  message: string
  /** Ajv keyword (enum, type, required, additionalProperties, maximum, ...). */
  keyword: string
  params: Record<string, unknown>
}

const ajv = new Ajv2020({ allErrors: true, strict: false })
addFormats(ajv, ['uri'])

const cache = new Map<string, UpstreamSchema | null>()

/** The upstream model id a schema file is named after (a Replicate version suffix dropped). */
export function schemaModelId (provider: string, model: string): string {
  return provider === 'replicate' ? model.split(':')[0] : model
}

/** Where the schema of `model` on `provider` lives (or would live). Throws on a path-like id. */
export function schemaFile (provider: string, model: string, dir = DEFAULT_SCHEMAS_DIR): string {
  const id = schemaModelId(provider, model)
  const parts = id.split('/')
  if (!/^[a-z]+$/.test(provider) || parts.some(p => p === '' || p === '.' || p === '..' || p.includes('\\'))) throw new Error(`not a model id: ${JSON.stringify(model)}`)
  return join(dir, provider, ...parts) + '.json'
}

/**
 * The schema of an upstream model, or null when the project has no file for it. A file that
 * is not valid JSON or whose `input` does not compile throws (a broken file is a mistake, not
 * an unknown model).
 */
export function loadUpstreamSchema (provider: string, model: string, dir = DEFAULT_SCHEMAS_DIR): UpstreamSchema | null {
  let file: string
  try { file = schemaFile(provider, model, dir) } catch { return null }
  if (cache.has(file)) return cache.get(file)!
  let out: UpstreamSchema | null = null
  if (existsSync(file)) {
    let doc: UpstreamSchemaDoc
    try { doc = JSON.parse(readFileSync(file, 'utf8')) } catch (err) { throw new Error(`${file}: not valid JSON: ${(err as Error).message}`) }
    if (!doc || typeof doc !== 'object' || !doc.input || typeof doc.input !== 'object') throw new Error(`${file}: has no "input" schema object`)
    let validate: ValidateFunction
    try { validate = ajv.compile(doc.input) } catch (err) { throw new Error(`${file}: its input schema does not compile: ${(err as Error).message}`) }
    const open = doc.verified === false && Object.keys(doc.input.properties ?? {}).length === 0
    out = { doc, file, validate, open }
  }
  cache.set(file, out)
  return out
}

/** Checks an upstream input against a schema; [] when it would be taken. */
export function checkInput (schema: UpstreamSchema, input: Record<string, unknown>): InputIssue[] {
  if (schema.open) return []
  if (schema.validate(input)) return []
  return (schema.validate.errors ?? []).map(issueOf)
}

const fieldValidators = new WeakMap<UpstreamSchema, Map<string, ValidateFunction>>()

/** Checks one top-level field's value against its property schema ([] when taken or unknown). */
export function checkField (schema: UpstreamSchema, field: string, value: unknown): InputIssue[] {
  const prop = schema.doc.input.properties?.[field]
  if (prop === undefined || schema.open) return []
  let byField = fieldValidators.get(schema)
  if (!byField) { byField = new Map(); fieldValidators.set(schema, byField) }
  let v = byField.get(field)
  if (!v) { v = ajv.compile({ type: 'object', properties: { [field]: prop } }); byField.set(field, v) }
  if (v({ [field]: value })) return []
  return (v.errors ?? []).map(issueOf)
}

function issueOf (e: ErrorObject): InputIssue {
  const path = e.instancePath.split('/').slice(1).map(s => s.replace(/~1/g, '/').replace(/~0/g, '~'))
  if (e.keyword === 'required') path.push(String((e.params as { missingProperty: string }).missingProperty))
  if (e.keyword === 'additionalProperties') path.push(String((e.params as { additionalProperty: string }).additionalProperty))
  let message = e.message ?? 'is invalid'
  if (e.keyword === 'enum') message = `must be one of ${((e.params as { allowedValues: unknown[] }).allowedValues).map(v => JSON.stringify(v)).join(', ')}`
  if (e.keyword === 'required') message = 'field required'
  if (e.keyword === 'additionalProperties') message = 'extra fields not permitted'
  return { field: path[0] ?? '', path, message, keyword: e.keyword, params: e.params as Record<string, unknown> }
}
