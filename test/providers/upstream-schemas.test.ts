// The upstream schemas shipped in config/upstream-schemas (docs/upstream-models.md) and the shipped
// example routes: every route names a model whose schema is with the project, maps only fields
// that schema has, and its literal values and value-table targets are values the upstream enum
// takes. Reads files only; the boot check that will enforce this at runtime builds on the same data.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const CONFIG = fileURLToPath(new URL('../../../config/', import.meta.url))
const SCHEMAS = join(CONFIG, 'upstream-schemas')
const KEYS = ['api', 'input', 'model', 'note', 'output', 'provider', 'read_on', 'sources', 'verified']

interface SchemaFile {
  provider: string; model: string; verified: boolean; sources: string[]; read_on: string
  api: string; note: string; input: { type: string; properties?: Record<string, any>; required?: string[] }; output: Record<string, unknown>
}

function walk (dir: string): string[] {
  return readdirSync(dir).flatMap(n => {
    const p = join(dir, n)
    return statSync(p).isDirectory() ? walk(p) : [p]
  })
}

const files = walk(SCHEMAS).filter(p => p.endsWith('.json'))
const schemaOf = (provider: string, model: string): SchemaFile | null => {
  const p = join(SCHEMAS, provider, `${model}.json`)
  return existsSync(p) ? JSON.parse(readFileSync(p, 'utf8')) as SchemaFile : null
}
const example = JSON.parse(readFileSync(join(CONFIG, 'providers.example.json'), 'utf8')) as { routes: Record<string, Array<{ provider: string; model: string; input?: Record<string, unknown> }>> }

/** Values a mapping entry can send without reading the request: a literal, or a value table's targets (after `as`). */
function fixedValues (v: unknown): unknown[] {
  if (typeof v === 'string') return v.startsWith('$.') ? [] : [v]
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return typeof v === 'object' ? [] : [v]
  const ref = v as { from?: string; as?: string; map?: Record<string, unknown> }
  if (typeof ref.from !== 'string') return []
  return Object.values(ref.map ?? {}).map(x => ref.as === 'integer' || ref.as === 'number' ? Number(x) : ref.as === 'string' ? String(x) : x)
}

function enumOf (prop: any): unknown[] | null {
  if (Array.isArray(prop?.enum)) return prop.enum
  if (Array.isArray(prop?.anyOf)) {
    // A preset list plus an object form (fal's image_size): only strings are checked against the presets.
    const lists = prop.anyOf.filter((a: any) => Array.isArray(a.enum)).flatMap((a: any) => a.enum)
    return lists.length > 0 ? lists : null
  }
  return null
}

t.test('every schema file has the documented shape and lives at <provider>/<model>.json', async (t) => {
  t.ok(files.length >= 60, `${files.length} schema files`)
  for (const f of files) {
    const d = JSON.parse(readFileSync(f, 'utf8')) as SchemaFile
    const at = f.slice(SCHEMAS.length + 1)
    t.same(Object.keys(d).sort(), KEYS, `${at}: exactly the documented keys`)
    t.equal(at, `${d.provider}/${d.model}.json`, `${at}: path is provider/model`)
    t.ok(['fal', 'replicate', 'kie'].includes(d.provider), `${at}: provider`)
    t.ok(Array.isArray(d.sources) && d.sources.length > 0 && d.sources.every(s => typeof s === 'string' && s !== ''), `${at}: names its sources`)
    t.match(d.read_on, /^\d{4}-\d{2}-\d{2}$/, `${at}: read_on is a date`)
    t.equal(d.input?.type, 'object', `${at}: input is an object schema`)
    t.type(d.verified, 'boolean', `${at}: verified`)
    if (!d.verified) t.ok(d.note.length > 20, `${at}: an unverified schema says why`)
    for (const r of d.input.required ?? []) t.ok(d.input.properties && r in d.input.properties, `${at}: required ${r} is a property`)
  }
})

t.test('every example route maps only fields its upstream schema has, with values its enums take', async (t) => {
  const unverified: string[] = []
  for (const [model, routes] of Object.entries(example.routes)) {
    routes.forEach((r, i) => {
      const at = `${model}[${i}] ${r.provider} ${r.model}`
      const s = schemaOf(r.provider, r.model)
      if (!t.ok(s, `${at}: schema file exists`) || s === null) return
      if (!s.verified) unverified.push(`${r.provider}:${r.model}`)
      const props = s.input.properties ?? {}
      for (const [field, value] of Object.entries(r.input ?? {})) {
        t.ok(field in props, `${at}: ${field} is an upstream field`)
        const prop = props[field]
        if (value !== null && typeof value === 'object' && !Array.isArray(value) && !('from' in value)) {
          // A nested literal object (MiniMax voice_setting): its keys must be the nested schema's.
          for (const k of Object.keys(value)) t.ok(prop?.properties && k in prop.properties, `${at}: ${field}.${k} is an upstream field`)
          continue
        }
        const allowed = enumOf(prop)
        if (allowed === null) continue
        for (const x of fixedValues(value)) t.ok(allowed.includes(x), `${at}: ${field} value ${JSON.stringify(x)} is one of ${JSON.stringify(allowed)}`)
      }
      for (const req of s.input.required ?? []) {
        t.ok(r.input && req in r.input, `${at}: required upstream field ${req} is mapped`)
      }
    })
  }
  // The only routes on schemas without a first-hand source; docs/upstream-models.md names them.
  t.same([...new Set(unverified)].sort(), ['kie:grok-imagine/text-to-image', 'kie:grok-imagine/text-to-video'])
})

t.test('a mapping mistake is caught: a field the schema lacks, a value its enum refuses', async (t) => {
  // The same checks on a hand-made wrong route, so the test above is not vacuous.
  const s = schemaOf('fal', 'fal-ai/veo3.1/fast')!
  const props = s.input.properties!
  t.notOk('image_url' in props, 'fal-ai/veo3.1/fast has no image_url (image-to-video is its own endpoint)')
  t.notOk(enumOf(props.duration)!.includes('8'), 'veo3.1 durations carry an s suffix')
  t.ok(fixedValues({ from: '$.output_format', map: { jpeg: 'jpg' } }).every(x => !enumOf(schemaOf('fal', 'fal-ai/nano-banana')!.input.properties!.output_format)!.includes(x)),
    'fal nano-banana takes jpeg, so a jpeg -> jpg table would be refused')
})
