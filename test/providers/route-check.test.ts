// The boot check of every route against its upstream schema (docs/providers.md "Boot check"):
// the shipped example passes; a route without a schema file, a literal its enum or type refuses,
// a required field never filled, or a field the schema refuses as unknown stops the boot with one
// line naming model, route index, provider/upstream model and field.
import { spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { checkRoutesAgainstSchemas, loadRouting, parseRouting } from '../../src/providers/routing.js'

const ENV = { FAL_KEY: 'k', REPLICATE_API_TOKEN: 'r', KIE_API_KEY: 'q' }
const dir = mkdtempSync(join(tmpdir(), 'gjt-route-check-'))
let n = 0
function file (routes: unknown): string {
  const f = join(dir, `routes-${++n}.json`)
  writeFileSync(f, JSON.stringify({ routes }))
  return f
}

t.test('the shipped example passes the boot check', async (t) => {
  const table = loadRouting('config/providers.example.json', ENV)
  t.ok(table && Object.keys(table.routes).length >= 20)
})

t.test('a route whose upstream model has no schema file stops the boot and says where to put it', async (t) => {
  const f = file({ 'veo3-fast': [{ provider: 'simulated' }, { provider: 'fal', model: 'fal-ai/not-with-the-project', input: { prompt: '$.prompt' } }] })
  t.throws(() => loadRouting(f, ENV), /routes\.veo3-fast\[1\] \(fal fal-ai\/not-with-the-project\): no upstream schema .*config\/upstream-schemas\/fal\/fal-ai\/not-with-the-project\.json/)
  const k = file({ 'grok-video': [{ provider: 'kie', model: 'veo3', input: { prompt: '$.prompt' } }] })
  t.throws(() => loadRouting(k, ENV), /routes\.grok-video\[0\] \(kie veo3\): no upstream schema/)
})

t.test('a literal of the wrong enum or type, and a value-table entry the enum refuses, stop the boot naming the field', async (t) => {
  t.throws(() => loadRouting(file({ 'veo3-fast': [{ provider: 'fal', model: 'fal-ai/veo3.1/fast', input: { prompt: '$.prompt', duration: '15s' } }] }), ENV),
    /routes\.veo3-fast\[0\] \(fal fal-ai\/veo3\.1\/fast\): field duration: the literal "15s" must be one of "4s", "6s", "8s"/)
  t.throws(() => loadRouting(file({ 'veo3-quality': [{ provider: 'replicate', model: 'google/veo-3.1', input: { prompt: '$.prompt', duration: '8' } }] }), ENV),
    /routes\.veo3-quality\[0\] \(replicate google\/veo-3\.1\): field duration: the literal "8" must be/, 'a string where the schema has integers')
  t.throws(() => loadRouting(file({
    'minimax-h3': [{ provider: 'fal', model: 'fal-ai/minimax/hailuo-02/standard/image-to-video', input: { prompt: '$.prompt', image_url: '$.image_url', resolution: { from: '$.resolution', map: { '768p': '768p' } } } }],
  }), ENV), /routes\.minimax-h3\[0\] .*field resolution: the literal "768p" must be one of "512P", "768P"/)
  t.doesNotThrow(() => loadRouting(file({
    'minimax-h3': [{ provider: 'fal', model: 'fal-ai/minimax/hailuo-02/standard/image-to-video', input: { prompt: '$.prompt', image_url: '$.image_url', resolution: { from: '$.resolution', map: { '768p': '768P' } } } }],
  }), ENV), 'the same table with the upstream spelling passes')
})

t.test('a required field the mapping never fills stops the boot; so does a route without a mapping whose schema needs a field we never send', async (t) => {
  t.throws(() => loadRouting(file({ lipsync: [{ provider: 'fal', model: 'fal-ai/sync-lipsync/v3/image-to-video', input: { image_url: '$.image_url' } }] }), ENV),
    /routes\.lipsync\[0\] \(fal fal-ai\/sync-lipsync\/v3\/image-to-video\): field audio_url: the upstream schema requires it and the input mapping never fills it/)
  t.throws(() => loadRouting(file({ lipsync: [{ provider: 'fal', model: 'fal-ai/sync-lipsync/v2' }] }), ENV),
    /routes\.lipsync\[0\] \(fal fal-ai\/sync-lipsync\/v2\): field video_url: the upstream schema requires it and the route has no input mapping/)
})

t.test('a mapped field the schema lacks stops the boot only where the schema refuses unknown fields', async (t) => {
  const schemas = mkdtempSync(join(tmpdir(), 'gjt-schemas-'))
  mkdirSync(join(schemas, 'fal', 'acme'), { recursive: true })
  const closed = { provider: 'fal', model: 'acme/closed', verified: true, sources: ['test'], input: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'], additionalProperties: false } }
  writeFileSync(join(schemas, 'fal', 'acme', 'closed.json'), JSON.stringify(closed))
  writeFileSync(join(schemas, 'fal', 'acme', 'open.json'), JSON.stringify({ ...closed, model: 'acme/open', input: { ...closed.input, additionalProperties: undefined } }))
  const table = (model: string) => parseRouting({ routes: { 'veo3-fast': [{ provider: 'fal', model, input: { prompt: '$.prompt', seed: 7 } }] } }, ENV)
  t.throws(() => checkRoutesAgainstSchemas(table('acme/closed'), 'F', schemas), /^F: routes\.veo3-fast\[0\] \(fal acme\/closed\): field seed: mapped, but the upstream schema has no such field and refuses unknown fields$/)
  t.doesNotThrow(() => checkRoutesAgainstSchemas(table('acme/open'), 'F', schemas))
})

t.test('npm start with a route that fails the check prints one line naming it and exits 1', { timeout: 60_000 }, async (t) => {
  const f = file({ 'veo3-fast': [{ provider: 'fal', model: 'fal-ai/veo3.1/fast', input: { prompt: '$.prompt', duration: '15s' } }] })
  const data = mkdtempSync(join(tmpdir(), 'gjt-boot-'))
  const child = spawn(process.execPath, ['dist/src/main.js'], {
    // A database nobody listens on: the check runs before anything starts, the database included.
    env: { ...process.env, PORT: '0', DATA_DIR: data, PROVIDERS_FILE: f, FAL_KEY: 'k', LOG_LEVEL: 'silent', DATABASE_URL: 'postgres://postgres@127.0.0.1:9/none' },
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let err = ''
  child.stderr.on('data', (b: Buffer) => { err += b.toString() })
  const code = await new Promise<number | null>(resolve => child.on('exit', resolve))
  t.equal(code, 1)
  const lines = err.trim().split('\n')
  t.equal(lines.length, 1, err)
  t.match(lines[0], /routes\.veo3-fast\[0\] \(fal fal-ai\/veo3\.1\/fast\): field duration/)
})
