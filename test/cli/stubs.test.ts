// `npm run stubs` (src/cli/stubs.ts, docs/providers.md "Testing against stubs"): the real command starts the
// fal, Replicate and Kie stubs and prints an env block; a service started with exactly that env
// completes a job on each provider, with its result copied into our storage.
import t from 'tap'
import { spawn } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { UNLIMITED_TIERS, paidUser, pollJob } from '../helpers/jobs.js'
import { startServer } from '../helpers/server.js'

async function freePort (): Promise<number> {
  return new Promise((resolve) => { const s = createServer(); s.listen(0, '127.0.0.1', () => { const p = (s.address() as any).port; s.close(() => resolve(p)) }) })
}

const dataDir = await mkdtemp(join(tmpdir(), 'gjt-stubs-'))
t.teardown(() => rm(dataDir, { recursive: true, force: true }))
const npm = spawn('npm', ['run', '--silent', 'stubs'], { cwd: process.cwd(), env: { ...process.env, DATA_DIR: dataDir, STUBS_FINISH_MS: '500' }, stdio: ['ignore', 'pipe', 'pipe'] })
let out = ''
npm.stdout.on('data', (d) => { out += d })
npm.stderr.on('data', (d) => { out += d })
const exited = new Promise<number | null>((resolve) => npm.on('exit', (code) => resolve(code)))
t.teardown(() => { if (npm.exitCode === null) npm.kill('SIGKILL') })
while (!out.includes('# stubs ready')) {
  if (npm.exitCode !== null) throw new Error('npm run stubs exited: ' + out)
  await Promise.race([new Promise<void>((resolve) => npm.stdout.once('data', () => resolve())), exited])
}

/** The printed block, read as a shell would: `export NAME='value'`. */
const env: Record<string, string> = {}
for (const m of out.matchAll(/^export ([A-Z_]+)='((?:[^']|'\\'')*)'$/gm)) env[m[1]] = m[2].replace(/'\\''/g, "'")

t.test('the printed env names the routing file, every credential and endpoint, and the allowlist; the same block is in DATA_DIR/stubs/env', async (t) => {
  t.same(Object.keys(env).sort(), ['FAL_JWKS_URL', 'FAL_KEY', 'FAL_QUEUE_URL', 'KIE_API_KEY', 'KIE_API_URL', 'KIE_WEBHOOK_HMAC_KEY', 'PROVIDERS_FILE',
    'REPLICATE_API_TOKEN', 'REPLICATE_API_URL', 'REPLICATE_WEBHOOK_SECRET', 'WEBHOOK_ALLOWLIST'])
  t.equal(env.PROVIDERS_FILE, join(dataDir, 'stubs', 'providers.json'))
  const file = await readFile(join(dataDir, 'stubs', 'env'), 'utf8')
  for (const [k, v] of Object.entries(env)) t.ok(file.includes(`${k}='${v}'`), `${k} in the env file`)
})

t.test('a service started with that env runs veo3-fast on fal, kling-3.0 on Replicate and seedance-2-fast on Kie to completion', { timeout: 90_000 }, async (t) => {
  const port = await freePort()
  const s = await startServer(t, { ...env, PORT: String(port), PUBLIC_BASE_URL: `http://127.0.0.1:${port}`, SHARDS: '1', TIER_LIMITS: UNLIMITED_TIERS })
  const u = await paidUser(s, 100_000)
  const cases: Array<[string, string]> = [['veo3-fast', 'fal'], ['kling-3.0', 'replicate'], ['seedance-2-fast', 'kie']]
  await Promise.all(cases.map(async ([model, provider]) => {
    const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model, prompt: `a ${provider} test` } })
    t.equal(r.status, 201, `${model}: ${r.text}`)
    const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 60_000, everyMs: 200 })
    t.equal(job.status, 'completed', `${model} completed (${job.error_message ?? ''})`)
    t.ok(job.result_url.startsWith(`http://127.0.0.1:${port}/files/`), `${model}: the result is our copy`)
    const a = await s.req('GET', `/v1/admin/jobs/${r.body.id}`, { admin: true })
    t.equal(a.body.provider, provider, `${model} ran on ${provider}`)
    t.match(out, new RegExp(`${provider}: job \\S+ for `), `the stubs printed the ${provider} submission`)
  }))
})

t.test('SIGTERM to npm stops the stubs: exit 0', async (t) => {
  npm.kill('SIGTERM')
  t.equal(await exited, 0)
})
