// GET /v1/openapi.json (docs/api.md "Endpoints"): a valid OpenAPI 3.1 document that describes every
// route of the route table with its parameters, bodies, responses and error codes.
import t from 'tap'
import SwaggerParser from '@apidevtools/swagger-parser'
import { ERRORS } from '../../src/errors.js'
import { IMAGE_MODEL_IDS, VIDEO_MODEL_IDS } from '../../src/catalog/index.js'
import { Ajv2020 } from 'ajv/dist/2020.js'
import addFormatsModule from 'ajv-formats'
import { declaredMethods, declaredPaths, routeBase } from '../../src/http/openapi.js'
import { allRoutes } from '../../src/http/routes/index.js'
import type { Route } from '../../src/http/route.js'
import { startServer } from '../helpers/server.js'
import { FAST_ENV, paidUser, pollJob, video } from '../helpers/jobs.js'
import { multipart, png } from '../fixtures/media.js'

const s = await startServer(t, FAST_ENV)
const r = await s.req('GET', '/v1/openapi.json')
const doc = r.body
const routes = allRoutes(() => doc)
type Op = Record<string, any>
const ops: Array<{ path: string; method: string; op: Op }> = []
for (const [path, item] of Object.entries<Record<string, any>>(doc.paths)) {
  for (const [method, op] of Object.entries(item)) if (['get', 'head', 'post', 'put', 'patch', 'delete'].includes(method)) ops.push({ path, method, op })
}
const opOf = (method: string, path: string): Op => doc.paths[path]?.[method]
/** `get /jobs/{id}` style: every operation the route table declares (its paths, rest shapes and HEAD). */
const declared = (r: Route) => declaredPaths(r).flatMap(p => declaredMethods(r).map(m => `${m.toLowerCase()} ${p}`))
const routeOf = (method: string, path: string): Route => routes.find(x => declared(x).includes(`${method} ${path}`))!

t.test('the document is valid OpenAPI 3.1 (@apidevtools/swagger-parser), version 1.0.0', async (t) => {
  t.equal(r.status, 200)
  t.match(r.headers.get('content-type'), /application\/json/)
  t.equal(doc.openapi, '3.1.0')
  t.equal(doc.info.version, '1.0.0', 'SPEC.md 9: the description document version')
  // validate() dereferences in place: give it a copy.
  const api = await SwaggerParser.validate(structuredClone(doc)) as { openapi?: string }
  t.equal(api.openapi, '3.1.0', 'valid against the OpenAPI 3.1 schema, every $ref resolves')
  // The validator does reject a broken document (so the check above means something).
  const broken = structuredClone(doc)
  broken.paths['/assets'].get.responses = { 200: { content: {} } }
  await t.rejects(SwaggerParser.validate(broken), 'a response without description is refused')
  const dangling = structuredClone(doc)
  dangling.paths['/assets'].get.responses['500'].content['application/json'].schema = { $ref: '#/components/schemas/Nope' }
  await t.rejects(SwaggerParser.validate(dangling), 'a dangling $ref is refused')
  t.equal(doc.servers[0].url, `${s.config.publicBaseUrl}/v1`)
})

t.test('every route of the route table is described, and nothing else', async (t) => {
  const want = [...new Set(routes.flatMap(declared))].sort()
  const have = ops.map(o => `${o.method} ${o.path}`).sort()
  t.same(have, want)
  t.ok(want.length >= 40, `${want.length} operations`)
  for (const p of ['get /assets', 'get /usage/summary', 'get /usage/limits', 'get /docs', 'post /uploads', 'get /files/{path}', 'head /files/{path}', 'get /sse/jobs/{id}', 'post /webhooks', 'post /admin/accounts', 'post /auth/keys', 'post /auth/login', 'get /v1', 'get /', 'get /metrics']) {
    if (!routes.some(x => declared(x).includes(p))) continue // a route another issue has not landed yet
    t.ok(have.includes(p), p)
  }
  const ids = ops.map(o => o.op.operationId)
  t.equal(new Set(ids).size, ids.length, 'operationIds are unique')
})

t.test('generate request schemas enumerate the whole catalogue: 15 video and 6 image model ids', async (t) => {
  const models = (await s.req('GET', '/v1/models')).body
  t.equal(VIDEO_MODEL_IDS.length, 15)
  t.equal(IMAGE_MODEL_IDS.length, 6)
  const bodyOf = (path: string) => opOf('post', path).requestBody.content['application/json'].schema
  const video = bodyOf('/generate/video').properties.model.enum
  const image = bodyOf('/generate/image').properties.model.enum
  t.same([...video].sort(), [...VIDEO_MODEL_IDS].sort())
  t.same([...image].sort(), [...IMAGE_MODEL_IDS].sort())
  t.same([...video].sort(), [...models.supported_model_ids.video].sort(), 'the same ids GET /v1/models lists')
  t.same([...image].sort(), [...models.supported_model_ids.image].sort())
  for (const id of ['wan-3.0', 'wan-3.0-prime', 'minimax-h3']) t.ok(video.includes(id), `catalogue-only video id ${id}`)
  for (const id of ['nano-banana-2.1', 'gpt-image-2.5']) t.ok(image.includes(id), `catalogue-only image id ${id}`)
  const batch = JSON.stringify(bodyOf('/batch'))
  for (const id of [...VIDEO_MODEL_IDS, ...IMAGE_MODEL_IDS]) t.ok(batch.includes(`"${id}"`), `batch items accept ${id}`)
})

t.test('every operation has parameters for its path, a request body where it reads one, a 2xx with content and error responses', async (t) => {
  for (const { path, method, op } of ops) {
    const name = `${method.toUpperCase()} ${path}`
    const route = routeOf(method, path)
    t.ok(op.summary && op.tags?.length === 1 && op.operationId, `${name}: summary, tag, operationId`)
    for (const [, p] of path.matchAll(/\{([^}]+)\}/g)) {
      t.ok(op.parameters?.some((x: any) => x.in === 'path' && x.name === p && x.required === true), `${name}: path parameter ${p}`)
    }
    const query = route.schema?.query as any
    for (const q of Object.keys(query?.properties ?? {})) t.ok(op.parameters?.some((x: any) => x.in === 'query' && x.name === q && x.schema), `${name}: query parameter ${q}`)
    if (route.schema?.body || route.rawBodySchema) t.ok(op.requestBody?.content, `${name}: request body`)
    const success = Object.entries<any>(op.responses).filter(([st]) => st.startsWith('2'))
    // 204 (an SSE reconnect after done) is the one success without a body.
    // HEAD answers have no body.
    t.ok(success.length > 0 && success.every(([st, x]) => st === '204' || method === 'head' ? x.content === undefined : x.content && Object.keys(x.content).length > 0), `${name}: 2xx responses have content (204, HEAD: none)`)
    const codes: string[] = op['x-error-codes']
    t.ok(Array.isArray(codes) && codes.includes('INTERNAL_ERROR'), `${name}: x-error-codes`)
    const missing = codes.filter(c =>
      !(c in ERRORS) || (ERRORS[c as keyof typeof ERRORS].status !== 0 && !op.responses[String(ERRORS[c as keyof typeof ERRORS].status)]))
    t.same(missing, [], `${name}: every code has a response with its status`)
    const errorResponses = Object.entries<any>(op.responses).filter(([st]) => Number(st) >= 400)
    if (method !== 'head') t.ok(errorResponses.some(([, x]) => x.content?.['application/json']?.schema?.$ref === '#/components/schemas/Error'), `${name}: the error envelope is referenced`)
    if (route.auth === 'key' || route.auth === 'session' || route.auth === 'admin') {
      t.ok(op.security?.length > 0, `${name}: security`)
      t.ok(codes.includes('AUTH_REQUIRED'), `${name}: AUTH_REQUIRED`)
    }
    if (route.schema?.body) t.ok(codes.includes('VALIDATION_ERROR') && codes.includes('PAYLOAD_TOO_LARGE') && codes.includes('UNSUPPORTED_MEDIA_TYPE'), `${name}: body errors (415 for a non-JSON Content-Type)`)
    if (route.schema?.body) t.same(Object.keys(op.requestBody.content), ['application/json'], `${name}: the body is JSON`)
    // Where it hangs from: /v1 routes from the document's servers, the rest from the root.
    const servers = (doc.paths[path].servers ?? doc.servers).map((x: any) => x.url)
    const bases = new Set(routes.filter(x => declared(x).includes(`${method} ${path}`)).map(x => routeBase(x.path)))
    t.equal(servers.includes(s.config.publicBaseUrl), bases.has('root'), `${name}: served at the root: ${[...bases].join(', ')}`)
    t.equal(servers.includes(`${s.config.publicBaseUrl}/v1`), bases.has('v1'), `${name}: served under /v1`)
    if (route.path.includes(':')) t.ok(codes.includes('INVALID_PARAM'), `${name}: INVALID_PARAM for malformed path parameters`)
    if (route.scope) t.equal(op['x-required-scope'], route.scope, `${name}: scope`)
    if (route.auth === 'key' || route.auth === 'session') {
      t.ok(op.responses['429']?.headers?.['Retry-After'], `${name}: 429 documents Retry-After`)
    }
  }
})

t.test('x-error-codes lists every code of src/errors.ts; every code an operation can answer is listed by one', async (t) => {
  const table = new Map<string, any>(doc['x-error-codes'].map((e: any) => [e.code, e]))
  for (const [code, e] of Object.entries(ERRORS)) {
    t.ok(table.has(code), `${code} in x-error-codes`)
    t.equal(table.get(code)?.http_status, e.status === 0 ? null : e.status, `${code} status`)
  }
  const answered = new Set(ops.flatMap(o => o.op['x-error-codes'] as string[]))
  // docs/api.md "Errors" fallbacks this service never needs (a failed submission has a specific code; a
  // job that fails later reports it on the job), and SKIPPED, which only appears inside /batch results.
  const notPerOperation = new Set(['GENERATION_FAILED', 'EXTEND_FAILED', 'SKIPPED'])
  t.same(Object.keys(ERRORS).filter(c => !answered.has(c) && !notPerOperation.has(c)), [], 'every other code is declared by some operation')
})

t.test('non-JSON answers are described: the docs page, SSE, file downloads, multipart uploads', async (t) => {
  t.ok(opOf('get', '/docs').responses['200'].content['text/html'], '/docs answers text/html')
  t.same(opOf('get', '/docs').security, [], '/docs is public')
  t.ok(opOf('get', '/docs/assets/{file}').responses['200'].content['text/javascript'])
  const sse = opOf('get', '/sse/jobs/{id}')
  if (sse) {
    t.ok(sse.responses['200'].content['text/event-stream'], 'SSE answers text/event-stream')
    t.ok(sse.parameters.some((p: any) => p.in === 'query' && p.name === 'ticket'), '?ticket=')
    t.ok(sse.parameters.some((p: any) => p.in === 'header' && p.name === 'Last-Event-ID'), 'Last-Event-ID')
    t.ok(sse.security.some((x: any) => 'ApiKeyHeader' in x) && sse.security.some((x: any) => Object.keys(x).length === 0), 'SSE: auth headers or a ticket')
  }
  const files = doc.paths['/files/{path}']
  if (files) {
    // Under /v1 first, so generated clients (which ignore path-level servers) reach it, and at the root, where the URLs the service hands out point.
    t.same(files.servers.map((x: any) => x.url), [`${s.config.publicBaseUrl}/v1`, '/v1', s.config.publicBaseUrl], '/files/{path}: /v1 and the root')
    t.ok(files.get.responses['200'].content, 'files: bytes')
    t.equal(files.get.responses['200'].content['*/*'].schema.type, undefined, 'binary bytes: no JSON type (OAS 3.1)')
    for (const st of ['206', '304', '416']) t.ok(files.get.responses[st]?.description, `files: ${st} declared`)
    t.ok(files.head, 'files: HEAD declared')
  }
  const up = opOf('post', '/uploads')
  if (up) t.ok(up.requestBody.content['multipart/form-data'], 'uploads: multipart/form-data')
})

t.test('the usage and assets operations document their query parameters and shapes', async (t) => {
  const summary = opOf('get', '/usage/summary')
  const params = Object.fromEntries(summary.parameters.map((p: any) => [p.name, p]))
  t.equal(params.from.schema.format, 'date')
  t.equal(params.to.schema.format, 'date')
  const body = summary.responses['200'].content['application/json'].schema
  t.same(Object.keys(body.properties).sort(), ['credits_charged', 'credits_refunded', 'daily', 'from', 'jobs_by_model', 'jobs_by_status', 'net_credits', 'requests', 'to'])
  const limits = opOf('get', '/usage/limits').responses['200'].content['application/json'].schema
  t.same(Object.keys(limits.properties).sort(), ['active_keys', 'active_webhooks', 'in_flight', 'max_active_keys', 'max_active_webhooks', 'max_concurrent', 'max_streams', 'open_streams', 'rate_limit_rpm', 'tier'])
  const assets = opOf('get', '/assets')
  t.same(assets.parameters.find((p: any) => p.name === 'kind').schema.anyOf.map((x: any) => x.const), ['character', 'voice'])
  t.same(Object.keys(assets.responses['200'].content['application/json'].schema.properties).sort(), ['data', 'has_more', 'limit', 'offset', 'total'])
})

t.test('the document is cached by ETag', async (t) => {
  const again = await s.req('GET', '/v1/openapi.json', { headers: { 'if-none-match': r.headers.get('etag')! } })
  t.equal(again.status, 304)
})

t.test('the response contract hook of test/helpers/server.ts fails a body the document does not describe', async (t) => {
  const { compile, responseProblems } = await import('../helpers/contract.js')
  const c = compile(structuredClone(doc))
  const health = await s.req('GET', '/v1/health')
  const ct = health.headers.get('content-type')
  t.equal(responseProblems(c, 'GET', '/v1/health', 200, ct, health.body), null, 'the real answer matches')
  t.match(responseProblems(c, 'GET', '/v1/health', 200, ct, { ...health.body, status: 'fine' }), /does not match.*\/status/, 'a wrong enum value is caught')
  t.match(responseProblems(c, 'GET', '/v1/health', 200, ct, { status: 'ok' }), /must have required property/, 'a missing field is caught')
  t.match(responseProblems(c, 'GET', '/v1/health', 418, ct, health.body), /does not declare/, 'an undeclared status is caught')
  t.match(responseProblems(c, 'GET', '/v1/jobs/job_x', 404, ct, { error: true, code: 'JOB_NOT_FOUND' }), /message/, 'an envelope without message is caught')
  t.match(responseProblems(c, 'GET', '/v1/nowhere', 200, ct, {}), /no such operation/, 'a 200 from an undescribed route is caught')
  t.equal(responseProblems(c, 'GET', '/v1/health', 200, 'application/toon', 'not json'), null, 'TOON is not checked')
  // And through req itself: the hook throws.
  const models = await s.req('GET', '/v1/models', { unchecked: true })
  t.equal(responseProblems(c, 'GET', '/v1/models', 200, models.headers.get('content-type'), { ...models.body, video: [{ ...models.body.video[0], capabilities: { ...models.body.video[0].capabilities, surprise: 1 } }] }) !== null, true, 'an undeclared capability key is caught (capabilities are typed)')
})

t.test('every JSON answer also declares application/toon with the same schema', async (t) => {
  let n = 0
  for (const { path, method, op } of ops) {
    for (const [status, resp] of Object.entries<any>(op.responses)) {
      const json = resp.content?.['application/json']
      if (!json) continue
      n++
      t.same(resp.content['application/toon']?.schema, json.schema, `${method} ${path} ${status}`)
    }
  }
  t.ok(n > 100, `${n} responses`)
})

t.test('the Error schema has every field the service sends; 504 promises details.job_id', async (t) => {
  const props = Object.keys(doc.components.schemas.Error.properties)
  for (const f of ['error', 'code', 'message', 'details', 'param', 'required_scope', 'pricing_url', 'retry_after', 'reason', 'reasons', 'violations', 'max_concurrent', 'in_flight', 'max_streams', 'required', 'available', 'status']) t.ok(props.includes(f), f)
  const gen504 = opOf('post', '/generate/video').responses['504'].content['application/json'].schema
  t.same(gen504, { $ref: '#/components/schemas/GatewayTimeoutError' })
  t.same(doc.components.schemas.GatewayTimeoutError.allOf[1].properties.details.required, ['job_id'])
  t.ok(opOf('get', '/sse/jobs/{id}').responses['429'].headers['Retry-After'], 'Retry-After on 429')
})

t.test('OAS 3.1 webhooks: the delivery body and the X-Service-* headers', async (t) => {
  for (const ev of ['job.completed', 'job.failed']) {
    const op = doc.webhooks?.[ev]?.post
    t.ok(op, ev)
    t.same(op.parameters.map((p: any) => p.name).sort(), ['X-Service-Delivery', 'X-Service-Event', 'X-Service-Signature'])
    t.ok(op.requestBody.content['application/json'].schema.allOf.some((x: any) => x.$ref === '#/components/schemas/WebhookEvent'))
  }
  t.same(doc.components.schemas.WebhookEvent.required, ['id', 'type', 'created_at', 'data'])
  t.same(doc.components.schemas.WebhookEvent.properties.data.properties.job, { $ref: '#/components/schemas/Job' })
})

t.test('typed catalogue capabilities and defaults; the upload file is binary', async (t) => {
  const entry = opOf('get', '/models').responses['200'].content['application/json'].schema.properties.video.items
  t.equal(entry.properties.capabilities.additionalProperties, false)
  t.ok(Object.keys(entry.properties.capabilities.properties).length >= 25, 'capability keys typed')
  t.equal(entry.properties.defaults.additionalProperties, false)
  const file = opOf('post', '/uploads').requestBody.content['multipart/form-data'].schema.properties.file
  t.equal(file.contentMediaType, 'application/octet-stream')
  // OAS 3.1 binary data has no `type` (with `type: string` generators type it as a string, not a Blob).
  t.equal(file.type, undefined)
})

t.test('every schema of the document compiles under Ajv strict mode (JSON Schema 2020-12)', async (t) => {
  const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020
  const components = doc.components.schemas
  // Inline component $refs so each schema compiles on its own.
  const inline = (x: any): any => Array.isArray(x)
    ? x.map(inline)
    : x && typeof x === 'object' ? (typeof x.$ref === 'string' ? inline(components[x.$ref.split('/').pop()]) : Object.fromEntries(Object.entries(x).map(([k, v]) => [k, inline(v)]))) : x
  const problems: string[] = []
  // strictTypes and strictTuples only log by default: make every strict rule throw.
  const raise = (m: string) => { throw new Error(m) }
  const ajv = addFormats(new Ajv2020({ strict: true, logger: { log () {}, warn: raise, error: raise } }))
  // Most schemas repeat (the error envelope, TOON next to JSON): each distinct one is compiled once.
  const seen = new Set<string>()
  const check = (where: string, schema: unknown) => {
    const text = JSON.stringify(inline(schema))
    if (seen.has(text)) return
    seen.add(text)
    try { ajv.compile(JSON.parse(text)) } catch (e) { problems.push(`${where}: ${(e as Error).message}`) }
  }
  for (const { path, method, op } of ops) {
    for (const p of op.parameters ?? []) if (p.schema) check(`${method} ${path} parameter ${p.name}`, p.schema)
    for (const [ct, m] of Object.entries<any>(op.requestBody?.content ?? {})) if (m.schema) check(`${method} ${path} body ${ct}`, m.schema)
    for (const [st, r] of Object.entries<any>(op.responses)) for (const [ct, m] of Object.entries<any>(r.content ?? {})) if (m.schema) check(`${method} ${path} ${st} ${ct}`, m.schema)
  }
  for (const [name, w] of Object.entries<any>(doc.webhooks)) check(`webhook ${name}`, w.post.requestBody.content['application/json'].schema)
  t.same(problems, [], `${seen.size} distinct schemas`)
  // The check bites: `required` naming an undeclared property is a strict-mode error.
  check('broken', { type: 'object', required: ['openapi'] })
  t.equal(problems.length, 1, 'a required property without properties is refused')
})

t.test('every operation declares the credential it checks; every tag is described', async (t) => {
  const metrics = opOf('get', '/metrics')
  t.same(metrics.security, [{ MetricsToken: [] }, { AdminToken: [] }], '/metrics: METRICS_TOKEN or ADMIN_TOKEN, never an API key or anonymous')
  t.ok(doc.components.securitySchemes.MetricsToken, 'the MetricsToken scheme exists')
  const u = await paidUser(s)
  t.equal((await s.req('GET', '/metrics')).status, 401, 'anonymous: 401')
  t.equal((await s.req('GET', '/metrics', { key: u.key, headers: { authorization: `Bearer ${u.key}` } })).status, 401, 'an API key: 401')
  t.equal((await s.req('GET', '/metrics', { admin: true })).status, 200, 'ADMIN_TOKEN: 200')
  for (const ev of ['job.completed', 'job.failed']) t.same(doc.webhooks[ev].post.security, [], `webhook ${ev}: the receiver gets no credential (the signature header proves the sender)`)
  for (const { path, method, op } of ops) {
    const r = routeOf(method, path)
    if (r.auth === 'public' && !r.security && !r.errors?.includes('AUTH_REQUIRED')) t.same(op.security, [], `${method} ${path}: public`)
  }
  for (const tag of doc.tags) t.ok(tag.description, `tag ${tag.name} is described`)
  t.same(new Set(doc.tags.map((x: any) => x.name)), new Set(ops.map(o => o.op.tags[0])), 'every tag used is listed')
})

/**
 * The declared operation an absolute URL under PUBLIC_BASE_URL reaches, matched as OpenAPI
 * tools match it: each server of the path item (relative ones against PUBLIC_BASE_URL), then
 * the template, each parameter being exactly one segment.
 */
function operationAt (method: string, url: string): string | null {
  const u = new URL(url)
  for (const [p, item] of Object.entries<any>(doc.paths)) {
    if (!item[method]) continue
    const template = new RegExp(`^${p.replace(/[.+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+')}$`)
    for (const server of item.servers ?? doc.servers) {
      const base = new URL(server.url, s.config.publicBaseUrl)
      const prefix = base.pathname.replace(/\/$/, '')
      if (base.origin === u.origin && u.pathname.startsWith(prefix) && template.test(u.pathname.slice(prefix.length))) return `${method} ${p}`
    }
  }
  return null
}

t.test('every URL the service answers or hands out matches a declared operation, raw slashes included', async (t) => {
  const base = s.config.publicBaseUrl
  const local = (url: string) => url.replace(base, s.url)
  const u = await paidUser(s)
  const { body, contentType } = multipart([{ name: 'kind', value: 'image' }, { name: 'file', filename: 'p.png', value: png() }])
  const up = await s.req('POST', '/v1/uploads', { key: u.key, raw: body, headers: { 'content-type': contentType } })
  t.equal(up.status, 201)
  const job = await s.req('POST', '/v1/generate/video', { key: u.key, body: video() })
  t.equal(job.status, 201)
  const done = (await pollJob(s, u, job.body.id)).job
  t.equal(done.status, 'completed')
  const lib = (await s.req('GET', '/v1/videos', { key: u.key })).body.data[0]
  const key = new URL(up.body.url).pathname.replace(/^\/files\//, '')
  const page = await (await fetch(`${s.url}/dashboard`)).text()
  const asset = /\/dashboard\/(assets\/[^"']+\.js)/.exec(page)?.[1]
  t.ok(asset, 'the dashboard page names its script')
  const handedOut = { upload: up.body.url, result_url: done.result_url, video_url: lib.video_url, thumbnail_url: lib.thumbnail_url, embed_url: lib.embed_url }
  const urls: Array<[string, string]> = [
    ...Object.entries(handedOut).map(([what, url]): [string, string] => [what, url]),
    ['index', `${base}/`], ['index under /v1', `${base}/v1`], ['health', `${base}/v1/health`], ['metrics', `${base}/metrics`],
    ['dashboard', `${base}/dashboard`], ['dashboard script', `${base}/dashboard/${asset}`], ['docs', `${base}/v1/docs`],
    ['/v1/files with raw slashes', `${base}/v1/files/${key}`], ['/v1/files, %2F', `${base}/v1/files/${encodeURIComponent(key)}`], ['/files, %2F', `${base}/files/${encodeURIComponent(key)}`],
  ]
  for (const [what, url] of urls) {
    t.ok(url.startsWith(base), `${what}: under PUBLIC_BASE_URL (${url})`)
    for (const method of ['get', 'head']) {
      if (method === 'head' && !/\/files\//.test(url)) continue
      const r = await fetch(local(url), { method: method.toUpperCase() })
      await r.arrayBuffer()
      t.ok(r.status < 400 || r.status === 401, `${what}: ${method.toUpperCase()} answers ${r.status}`)
      t.ok(operationAt(method, url), `${what}: ${method.toUpperCase()} ${new URL(url).pathname} is declared (${operationAt(method, url)})`)
    }
  }
  // The matcher bites: an unknown path, a deeper key than any the service writes, a wrong method.
  t.equal(operationAt('get', `${base}/v1/nowhere`), null)
  t.equal(operationAt('get', `${base}/files/a/b/c/d/e.png`), null)
  t.equal(operationAt('post', `${base}/v1/health`), null)
  t.equal(operationAt('get', `${base}/v1/v1`), null, '/v1 is declared at the root, not under the /v1 servers')
})

t.test('/batch: an item that is not valid passes the documented body and gets its own 400 in a 200', async (t) => {
  const { compile } = await import('../helpers/contract.js')
  const c = compile(structuredClone(doc))
  const validate = c.ajv.getSchema('openapi.json#/paths/~1batch/post/requestBody/content/application~1json/schema')!
  const body = { jobs: [{ type: 'image', model: 'nano-banana', prompt: 'a red apple', surprise: 1 }, 42, { type: 'image', model: 'nano-banana', prompt: 'a pear' }] }
  t.ok(validate(body), `the document accepts it: ${JSON.stringify(validate.errors)}`)
  t.notOk(validate({ jobs: [] }), 'an empty batch is refused by the document')
  t.notOk(validate({ jobs: [{ type: 'image', model: 'nano-banana', prompt: 'x' }], extra: true }), 'and so is an unknown top-level field')
  const u = await paidUser(s)
  const r = await s.req('POST', '/v1/batch', { key: u.key, body })
  t.equal(r.status, 200, 'the service takes it too')
  t.same(r.body.results.map((x: any) => x.status), [400, 400, 201], 'the bad items answer in their own slots')
  t.equal((await s.req('POST', '/v1/batch', { key: u.key, body: { jobs: [] } })).status, 400, 'an empty batch is a 400 for both')
})
