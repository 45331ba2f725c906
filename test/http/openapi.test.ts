// GET /v1/openapi.json (SPEC.md 4.1, 7, 9): a valid OpenAPI 3.1 document that describes every
// route of the route table with its parameters, bodies, responses and error codes.
import t from 'tap'
import SwaggerParser from '@apidevtools/swagger-parser'
import { ERRORS } from '../../src/errors.js'
import { IMAGE_MODEL_IDS, VIDEO_MODEL_IDS } from '../../src/catalog/index.js'
import { openApiPath } from '../../src/http/openapi.js'
import { allRoutes } from '../../src/http/routes/index.js'
import { startServer } from '../helpers/server.js'

const s = await startServer(t)
const r = await s.req('GET', '/v1/openapi.json')
const doc = r.body
const routes = allRoutes(() => doc)
type Op = Record<string, any>
const ops: Array<{ path: string; method: string; op: Op }> = []
for (const [path, item] of Object.entries<Record<string, any>>(doc.paths)) {
  for (const [method, op] of Object.entries(item)) if (['get', 'post', 'put', 'patch', 'delete'].includes(method)) ops.push({ path, method, op })
}
const opOf = (method: string, path: string): Op => doc.paths[path]?.[method]

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
  const want = routes.map(x => `${x.method.toLowerCase()} ${openApiPath(x.path)}`).sort()
  const have = ops.map(o => `${o.method} ${o.path}`).sort()
  t.same(have, want)
  t.ok(want.length >= 40, `${want.length} operations`)
  for (const p of ['get /assets', 'get /usage/summary', 'get /usage/limits', 'get /docs', 'post /uploads', 'get /files/{path}', 'get /sse/jobs/{id}', 'post /webhooks', 'post /admin/accounts', 'post /auth/keys', 'post /auth/login']) {
    if (!routes.some(x => `${x.method.toLowerCase()} ${openApiPath(x.path)}` === p)) continue // a route another issue has not landed yet
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
    const route = routes.find(x => x.method.toLowerCase() === method && openApiPath(x.path) === path)!
    t.ok(op.summary && op.tags?.length === 1 && op.operationId, `${name}: summary, tag, operationId`)
    for (const [, p] of path.matchAll(/\{([^}]+)\}/g)) {
      t.ok(op.parameters?.some((x: any) => x.in === 'path' && x.name === p && x.required === true), `${name}: path parameter ${p}`)
    }
    const query = route.schema?.query as any
    for (const q of Object.keys(query?.properties ?? {})) t.ok(op.parameters?.some((x: any) => x.in === 'query' && x.name === q && x.schema), `${name}: query parameter ${q}`)
    if (route.schema?.body || route.rawBodySchema) t.ok(op.requestBody?.content, `${name}: request body`)
    const success = Object.entries<any>(op.responses).filter(([st]) => st.startsWith('2'))
    // 204 (an SSE reconnect after done) is the one success without a body.
    t.ok(success.length > 0 && success.every(([st, x]) => st === '204' ? x.content === undefined : x.content && Object.keys(x.content).length > 0), `${name}: 2xx responses have content (204: none)`)
    const codes: string[] = op['x-error-codes']
    t.ok(Array.isArray(codes) && codes.includes('INTERNAL_ERROR'), `${name}: x-error-codes`)
    const missing = codes.filter(c =>
      !(c in ERRORS) || (ERRORS[c as keyof typeof ERRORS].status !== 0 && !op.responses[String(ERRORS[c as keyof typeof ERRORS].status)]))
    t.same(missing, [], `${name}: every code has a response with its status`)
    const errorResponses = Object.entries<any>(op.responses).filter(([st]) => Number(st) >= 400)
    t.ok(errorResponses.some(([, x]) => x.content?.['application/json']?.schema?.$ref === '#/components/schemas/Error'), `${name}: the error envelope is referenced`)
    if (route.auth === 'key' || route.auth === 'session' || route.auth === 'admin') {
      t.ok(op.security?.length > 0, `${name}: security`)
      t.ok(codes.includes('AUTH_REQUIRED'), `${name}: AUTH_REQUIRED`)
    }
    if (route.schema?.body) t.ok(codes.includes('VALIDATION_ERROR') && codes.includes('PAYLOAD_TOO_LARGE'), `${name}: body errors`)
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
  // SPEC.md 7 fallbacks this service never needs (a failed submission has a specific code; a
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
    // Declared under /v1 so generated clients (which ignore path-level servers) reach it; the root /files/<key> URLs the service hands out stay served.
    t.equal(files.servers, undefined, '/files/{path} is under the /v1 servers')
    t.ok(files.get.responses['200'].content, 'files: bytes')
    for (const st of ['206', '304', '416']) t.ok(files.get.responses[st]?.description, `files: ${st} declared`)
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
  t.equal(file.format, 'binary')
})
