// `npm run admin -- routes check [--online]` (docs/providers.md "routes check"), run as a
// separate process as an operator would: the model x option value x route matrix from the
// routing file and the shipped upstream schemas; with --online, the live schemas fetched from a
// stub serving fal's per-endpoint OpenAPI documents and Replicate's models API, and the drift
// from the shipped copies reported field by field.
import t from 'tap'
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { mkdtemp, writeFile } from 'node:fs/promises'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { loadUpstreamSchema } from '../../src/providers/upstream-schemas.js'
import { driftOf, shapeOf } from '../../src/providers/routes-check.js'

const CLI = fileURLToPath(new URL('../../src/cli/admin.js', import.meta.url))
const ROOT = fileURLToPath(new URL('../../../', import.meta.url))

interface Run { code: number; stdout: string; stderr: string; json: any }

function cli (args: string[], env: Record<string, string> = {}): Promise<Run> {
  const base: Record<string, string> = {}
  for (const k of ['PATH', 'HOME', 'SYSTEMROOT']) if (process.env[k]) base[k] = process.env[k]!
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...base, ...env }, cwd: ROOT, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as any).code === 'number' ? (err as any).code : 1) : 0
      let json: unknown
      try { json = JSON.parse(stdout) } catch {}
      resolve({ code, stdout, stderr, json })
    })
  })
}

const example = JSON.parse(readFileSync(join(ROOT, 'config/providers.example.json'), 'utf8'))
const dir = await mkdtemp(join(tmpdir(), 'gjt-routes-check-'))
const file = join(dir, 'routes.json')
const FAL_KLING = 'fal-ai/kling-video/v3/standard/text-to-video'
await writeFile(file, JSON.stringify({
  routes: {
    'kling-3.0': [example.routes['kling-3.0'][0]],
    'nano-banana': example.routes['nano-banana'].filter((r: any) => r.provider === 'replicate'),
    'grok-video': example.routes['grok-video'],
    'veo3-fast': [example.routes['veo3-fast'][0]],
  },
}))
t.equal(example.routes['kling-3.0'][0].model, FAL_KLING, 'the example routes kling-3.0 to the fal endpoint this test serves')

t.test('the matrix: every option value of every model against every route, served or why not', async (t) => {
  const r = await cli(['routes', 'check', '--file', file])
  t.equal(r.code, 0, r.stderr)
  t.match(r.stdout, `kling-3.0\n  route #0 fal ${FAL_KLING}`)
  t.match(r.stdout, /\n {4}aspect_ratio=16:9 +#0 served\n/, 'a value the upstream enum takes')
  t.match(r.stdout, /\n {2}! aspect_ratio=2:3 +#0 no \(aspect_ratio must be one of "16:9", "9:16", "1:1" \(got "2:3"\)\)\n/, 'a value no route serves is marked and explained')
  t.match(r.stdout, /\n {2}! mode=pro +#0 no \(the route's upstream model takes no mode\)\n/, 'an option the mapping drops')
  t.match(r.stdout, /option values, \d+ served by no route/)
  const j = await cli(['routes', 'check', '--json'], { PROVIDERS_FILE: file })
  t.equal(j.code, 0)
  const row = j.json.matrix.find((x: any) => x.model === 'kling-3.0' && x.field === 'aspect_ratio' && x.value === '2:3')
  t.same(row, { model: 'kling-3.0', field: 'aspect_ratio', value: '2:3', servedBySome: false, routes: [{ route: 0, served: false, why: 'aspect_ratio must be one of "16:9", "9:16", "1:1" (got "2:3")' }] })
  t.notOk('drift' in j.json, 'no drift section offline')
})

t.test('the shipped example file checks without credentials', async (t) => {
  const r = await cli(['routes', 'check', '--file', 'config/providers.example.json', '--json'])
  t.equal(r.code, 0, r.stderr)
  t.ok(r.json.matrix.length > 100, `${r.json.matrix.length} rows`)
})

t.test('bad command lines exit 2; a routing file that fails its check exits 1 with one line', async (t) => {
  for (const args of [['routes'], ['routes', 'list'], ['routes', 'check'], ['routes', 'check', '--file', file, 'extra'], ['routes', 'check', '--bogus']]) {
    const r = await cli(args)
    t.equal(r.code, 2, args.join(' '))
    t.match(r.stderr, /^error: /)
  }
  const bad = join(dir, 'bad.json')
  await writeFile(bad, JSON.stringify({ routes: { 'kling-3.0': [{ provider: 'fal', model: 'fal-ai/no-such-model' }] } }))
  const r = await cli(['routes', 'check', '--file', bad])
  t.equal(r.code, 1)
  t.match(r.stderr, /^error: PROVIDERS_FILE .*routes\.kling-3\.0\[0\] \(fal fal-ai\/no-such-model\): no upstream schema/)
  t.equal(r.stderr.trim().split('\n').length, 1, 'one line')
})

// The live documents: built from the shipped copies, as each provider publishes them.
const kling = loadUpstreamSchema('fal', FAL_KLING)!.doc.input
const banana = loadUpstreamSchema('replicate', 'google/nano-banana')!.doc.input

/** fal's OpenAPI document for an endpoint: optional fields as anyOf [X, null], enums under components. */
function falDocument (input: any): any {
  const props: Record<string, unknown> = {}
  const schemas: Record<string, unknown> = {}
  for (const [k, v] of Object.entries<any>(input.properties)) {
    if (v.enum) { schemas[`Kling${k}`] = { type: v.type, enum: v.enum }; props[k] = input.required?.includes(k) ? { $ref: `#/components/schemas/Kling${k}` } : { anyOf: [{ $ref: `#/components/schemas/Kling${k}` }, { type: 'null' }] } } else props[k] = v
  }
  schemas.KlingInput = { type: 'object', properties: props, required: input.required ?? [] }
  return {
    openapi: '3.0.4',
    paths: {
      [`/${FAL_KLING}`]: { post: { requestBody: { required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/KlingInput' } } } } } },
      [`/${FAL_KLING}/requests/{request_id}/status`]: { get: {} },
    },
    components: { schemas },
  }
}

/** Replicate's model object: the version's openapi_schema with Cog's allOf-wrapped enums. */
function replicateModel (input: any): any {
  const props: Record<string, unknown> = {}
  const schemas: Record<string, unknown> = {}
  for (const [k, v] of Object.entries<any>(input.properties)) {
    if (v.enum) { schemas[k] = { type: v.type, enum: v.enum, title: k }; props[k] = { allOf: [{ $ref: `#/components/schemas/${k}` }], default: v.default } } else props[k] = v
  }
  return {
    url: 'https://replicate.com/google/nano-banana', owner: 'google', name: 'nano-banana',
    latest_version: { id: 'v123', openapi_schema: { components: { schemas: { Input: { type: 'object', properties: props, required: input.required ?? [] }, ...schemas } } } },
  }
}

t.test('--online fetches fal\'s OpenAPI document and Replicate\'s latest version and reports drift field by field', async (t) => {
  // Upstream changed kling: a new field, 1:1 dropped and 4:3 added, prompt now required.
  const liveKling = structuredClone(kling)
  t.notOk(kling.required?.includes('prompt'), 'the shipped copy does not require prompt')
  liveKling.properties!.camera_path = { type: 'string' }
  liveKling.properties!.aspect_ratio.enum = ['16:9', '9:16', '4:3']
  liveKling.required = ['prompt']
  const seen: string[] = []
  const srv = createServer((req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''}`.trim())
    const u = new URL(req.url ?? '/', 'http://x')
    if (u.pathname === '/api/openapi/queue/openapi.json' && u.searchParams.get('endpoint_id') === FAL_KLING) return json(res, 200, falDocument(liveKling))
    if (u.pathname === '/api/openapi/queue/openapi.json') return json(res, 404, { detail: 'Not found' })
    if (u.pathname === '/v1/models/google/nano-banana') {
      if (req.headers.authorization !== 'Bearer r8_cli') return json(res, 401, { detail: 'Unauthenticated' })
      return json(res, 200, replicateModel(banana))
    }
    json(res, 404, {})
  })
  await new Promise<void>(resolve => srv.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => srv.close(() => resolve())))
  const base = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`
  const env = { FAL_OPENAPI_URL: `${base}/api/openapi/queue/openapi.json`, REPLICATE_API_URL: base, REPLICATE_API_TOKEN: 'r8_cli' }

  const r = await cli(['routes', 'check', '--file', file, '--online'], env)
  t.equal(r.code, 1, 'drift found: exit 1')
  t.match(r.stdout, `DRIFT   fal ${FAL_KLING} (kling-3.0#0)`)
  t.match(r.stdout, /added +new upstream field camera_path\n/)
  t.match(r.stdout, /enum +aspect_ratio values added "4:3" removed "1:1"\n/)
  t.match(r.stdout, /required +prompt is now required\n/)
  t.match(r.stdout, /same {4}replicate google\/nano-banana \(nano-banana#0\)/, 'Replicate\'s allOf-wrapped enums read as the shipped copy')
  t.match(r.stdout, /skipped kie grok-imagine\/text-to-video \(grok-video#0\)\n +Kie publishes no machine-readable input schema/)
  t.match(r.stdout, /ERROR +fal fal-ai\/veo3\.1\/fast \(veo3-fast#0\)\n +http:\/\/127\.0\.0\.1:\d+\/api\/openapi\/queue\/openapi\.json\?endpoint_id=fal-ai%2Fveo3\.1%2Ffast: HTTP 404/)
  t.match(r.stdout, /4 upstream models: 1 same, 1 drifted, 1 not reachable, 1 not checked online/)
  t.ok(seen.includes(`GET /api/openapi/queue/openapi.json?endpoint_id=${encodeURIComponent(FAL_KLING)}`), 'fal\'s document asked by endpoint id, without credentials')
  t.ok(seen.includes('GET /v1/models/google/nano-banana Bearer r8_cli'), 'Replicate\'s model asked with the token')

  const j = await cli(['routes', 'check', '--file', file, '--online', '--json'], env)
  const k = j.json.drift.find((d: any) => d.model === FAL_KLING)
  t.same(k.drift.map((d: any) => `${d.change}:${d.field}`).sort(), ['added:camera_path', 'enum:aspect_ratio', 'required:prompt'])

  const noToken = await cli(['routes', 'check', '--file', file, '--online'], { FAL_OPENAPI_URL: env.FAL_OPENAPI_URL, REPLICATE_API_URL: base })
  t.match(noToken.stdout, /skipped replicate google\/nano-banana \(nano-banana#0\)\n +REPLICATE_API_TOKEN is not set/)
})

t.test('drift: type changes, removed fields, a field newly required, an enum lifted', async (t) => {
  const shipped = shapeOf({ properties: { a: { type: 'string', enum: ['x', 'y'] }, b: { type: 'integer' }, c: { type: 'string' }, d: { type: 'string' } }, required: ['a'] })
  const live = shapeOf({ properties: { a: { type: 'string' }, b: { type: 'string' }, d: { anyOf: [{ type: 'string' }, { type: 'null' }] } }, required: ['a', 'd'] })
  t.same(driftOf(shipped, live).map(d => d.detail), [
    'field c is no longer in the upstream schema',
    'a is no longer limited to "x", "y"',
    'b type integer -> string',
    'd is now required',
  ])
  t.same(driftOf(shipped, shipped), [], 'a schema has no drift from itself')
})

function json (res: import('node:http').ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body))
}
