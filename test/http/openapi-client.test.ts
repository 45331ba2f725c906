// A client generated from the served /v1/openapi.json (openapi-typescript) compiles
// against a small typed flow that reads what SPEC.md tells clients to use: details.job_id on a
// 504, required_scope on a 403, retry_after on a 429, typed catalogue capabilities, the webhook
// delivery body. A flow reading a field the document lacks must not compile (the check bites).
// The same generated client uploads a Blob with no cast, and the upload runs.
import t from 'tap'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import ts from 'typescript'
import openapiTS, { astToString } from 'openapi-typescript'
import { createUser, startServer } from '../helpers/server.js'
import { png } from '../fixtures/media.js'

const s = await startServer(t)
const doc = (await s.req('GET', '/v1/openapi.json')).body
const dir = await mkdtemp(join(tmpdir(), 'gjt-client-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))
await writeFile(join(dir, 'api.ts'), astToString(await openapiTS(doc)))

/** Type-checks `flow` (strict) against the generated api.ts; answers the diagnostics as text. */
async function typecheck (name: string, flow: string, types = 'api'): Promise<string[]> {
  const file = join(dir, `${name}.ts`)
  flow = flow.replaceAll("from './api.js'", `from './${types}.js'`)
  await writeFile(file, flow)
  const program = ts.createProgram([file], {
    strict: true, noEmit: true, skipLibCheck: true, target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, types: [],
  })
  return ts.getPreEmitDiagnostics(program).map(d => ts.flattenDiagnosticMessageText(d.messageText, '\n'))
}

const FLOW = `import type { paths, webhooks } from './api.js'

type GenerateVideo = paths['/generate/video']['post']
type Json<R> = R extends { content: { 'application/json': infer B } } ? B : never

/** 504: the job was created and charged; poll it instead of paying twice. */
export function jobToPoll (e: Json<GenerateVideo['responses'][504]>): string {
  return e.details.job_id
}
/** 403 insufficient_scope: the scope to ask for. */
export function scopeToAsk (e: Json<GenerateVideo['responses'][403]>): string | undefined {
  return e.required_scope
}
/** 429: how long to wait (also the Retry-After header). */
export function secondsToWait (e: Json<GenerateVideo['responses'][429]>): number | undefined {
  return e.retry_after
}
/** Every error: the code and, for NOT_ELIGIBLE, the reasons. */
export function explain (e: Json<paths['/auth/keys']['post']['responses'][403]>): string {
  return e.code + ': ' + (e.reasons ?? []).join(', ') + (e.pricing_url ?? '')
}
/** The catalogue is typed: the longest prompt of the first video model. */
export function promptCap (m: Json<paths['/models']['get']['responses'][200]>): number | undefined {
  const c = m.video[0].capabilities
  return c.prompt_max_length ?? m.video[0].defaults?.duration?.length
}
/** Webhook receivers get a typed body. */
export function finished (body: webhooks['job.completed']['post']['requestBody']['content']['application/json']): string {
  return body.data.job.id + ' ' + body.data.job.status
}
/** File downloads take the key as one path parameter. */
export const fileKey: paths['/files/{path}']['get']['parameters']['path'] = { path: 'results/2026/01/x.png' }
/** TOON is declared next to JSON. */
export type Toon = GenerateVideo['responses'][201]['content']['application/toon']
`

t.test('the generated types compile against a flow reading details.job_id, required_scope, retry_after, capabilities and the webhook body', async (t) => {
  const errors = await typecheck('flow', FLOW)
  t.same(errors, [], 'no type errors')
})

t.test('the check bites: a flow reading fields the document does not have fails to compile', async (t) => {
  const bad = await typecheck('bad', `import type { paths } from './api.js'
type E = paths['/generate/video']['post']['responses'][504]['content']['application/json']
export const x = (e: E): string => e.details.jobId
export const y = (e: E): number => e.retry_afterr
`)
  t.equal(bad.length, 2, `two errors: ${bad.join(' | ')}`)
  t.match(bad.join('\n'), /jobId/)
})

const UPLOAD_FLOW = `import type { paths } from './api.js'

type Upload = paths['/uploads']['post']
export type UploadBody = Upload['requestBody']['content']['multipart/form-data']
export type Uploaded = Upload['responses'][201]['content']['application/json']

/** Uploads a Blob as the typed body holds it: no cast anywhere. */
export async function upload (baseUrl: string, key: string, file: Blob): Promise<Uploaded> {
  const body: UploadBody = { kind: 'image', file }
  const form = new FormData()
  form.append('kind', body.kind)
  if (body.file instanceof Blob) form.append('file', body.file, 'frame.png')
  const r = await fetch(baseUrl + '/uploads', { method: 'POST', headers: { 'x-api-key': key }, body: form })
  if (r.status !== 201) throw new Error('upload: ' + r.status + ' ' + await r.text())
  const out: Uploaded = await r.json()
  return out
}
`

t.test('a client generated by openapi-typescript uploads a Blob with no cast, and the upload works', async (t) => {
  t.same(await typecheck('upload', UPLOAD_FLOW), [], 'no type errors, no cast in the flow')
  t.notMatch(UPLOAD_FLOW, / as [A-Z]/, 'the flow has no `as` cast')
  // Run it: the flow's own JavaScript, against the server.
  const js = ts.transpileModule(UPLOAD_FLOW, { compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022 } }).outputText
  await writeFile(join(dir, 'upload.mjs'), js)
  const { upload } = await import(join(dir, 'upload.mjs'))
  const u = await createUser(s)
  const out = await upload(`${s.url}/v1`, u.key, new Blob([new Uint8Array(png())], { type: 'image/png' }))
  t.equal(out.kind, 'image')
  t.equal(out.size, png().length, 'the Blob\'s bytes were stored')
  t.same(Buffer.from(await (await fetch(out.url.replace(s.config.publicBaseUrl, s.url))).arrayBuffer()), png(), 'and are served back')
})

t.test('the check bites: with the OAS 3.0 spelling of the file (type: string), the Blob does not compile', async (t) => {
  const old = structuredClone(doc)
  old.paths['/uploads'].post.requestBody.content['multipart/form-data'].schema.properties.file = { type: 'string', format: 'binary' }
  await writeFile(join(dir, 'api-string.ts'), astToString(await openapiTS(old)))
  const errors = await typecheck('upload-string', UPLOAD_FLOW, 'api-string')
  t.ok(errors.length > 0, `errors: ${errors.join(' | ')}`)
  t.match(errors.join('\n'), /Blob/, 'the Blob is refused where a string is typed')
})
