/**
 * Every JSON answer a test gets through `req` (test/helpers/server.ts) is checked against the
 * served /v1/openapi.json: a response the document does not describe fails the test
 * that made it. The document is compiled once per process with Ajv (JSON Schema 2020-12, the
 * dialect of OpenAPI 3.1); `$ref`s resolve inside the document. TOON and other non-JSON answers,
 * HEAD and 304 are not checked.
 */
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js'
import addFormatsModule from 'ajv-formats'

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020

interface Compiled {
  doc: any
  ajv: Ajv2020
  /** [regex, OpenAPI path] per described path, most specific (fewest parameters) first. */
  paths: Array<[RegExp, string]>
  cache: Map<string, ValidateFunction | null>
}

let compiled: Promise<Compiled> | null = null

/** Loads the document from a running server, once per process. */
export function loadContract (baseUrl: string): Promise<Compiled> {
  compiled ??= (async () => {
    const r = await fetch(`${baseUrl}/v1/openapi.json`)
    if (r.status !== 200) throw new Error(`GET /v1/openapi.json: ${r.status}`)
    return compile(await r.json())
  })()
  return compiled
}

export function compile (doc: any): Compiled {
  const ajv = addFormats(new Ajv2020({ allErrors: true, strict: false, validateSchema: false }))
  ajv.addFormat('binary', true)
  ajv.addSchema(doc, 'openapi.json')
  const paths = Object.keys(doc.paths)
    .map((p): [RegExp, string, number] => {
      const re = p.replace(/[.+?^$()|[\]\\]/g, '\\$&').replace(/\{path\}/g, '.+').replace(/\{[^}]+\}/g, '[^/]+')
      return [new RegExp(`^${re}$`), p, (p.match(/\{/g) ?? []).length]
    })
    .sort((a, b) => a[2] - b[2])
    .map(([re, p]): [RegExp, string] => [re, p])
  return { doc, ajv, paths, cache: new Map() }
}

const ptr = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1')

/**
 * Problems of one answer against the document, or null when it matches (or is not checked).
 * `path` is the request path (with /v1 or at the root, query allowed).
 */
export function responseProblems (c: Compiled, method: string, path: string, status: number, contentType: string | null, body: unknown): string | null {
  if (method === 'HEAD' || status === 304 || status === 204) return null
  if (contentType === null || !/^application\/json\b/.test(contentType)) return null
  const bare = path.split('?')[0]
  const rel = bare === '/v1' ? '/' : bare.startsWith('/v1/') ? bare.slice(3) : bare
  const hit = c.paths.find(([re]) => re.test(rel))
  const op = hit ? c.doc.paths[hit[1]]?.[method.toLowerCase()] : undefined
  let ref: string
  if (!op) {
    // Not a described operation (unknown route, wrong method): only the error envelope may answer.
    if (status < 400) return `${method} ${bare} answered ${status} but the document describes no such operation`
    ref = 'openapi.json#/components/schemas/Error'
  } else {
    const key = [String(status), `${String(status)[0]}XX`, 'default'].find(k => op.responses?.[k])
    if (key === undefined) return `${method} ${hit![1]} answered ${status}, a status the document does not declare (declared: ${Object.keys(op.responses ?? {}).join(', ')})`
    if (!op.responses[key].content?.['application/json']) return `${method} ${hit![1]} answered ${status} with JSON, but the document declares no application/json for it`
    ref = `openapi.json#/paths/${ptr(hit![1])}/${method.toLowerCase()}/responses/${key}/content/application~1json/schema`
  }
  let v = c.cache.get(ref)
  if (v === undefined) { v = c.ajv.getSchema(ref) ?? null; c.cache.set(ref, v) }
  if (v === null) return `no schema at ${ref}`
  if (v(body)) return null
  return `${method} ${bare} ${status}: the body does not match ${ref.replace('openapi.json#', '')}: ${(v.errors ?? []).slice(0, 5).map(e => `${e.instancePath || '(body)'} ${e.message}${e.params && 'additionalProperty' in e.params ? ` (${String(e.params.additionalProperty)})` : ''}`).join('; ')}; body: ${JSON.stringify(body).slice(0, 400)}`
}
