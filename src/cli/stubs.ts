import { mkdir, writeFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
// The contract stubs the tests use (test/fixtures/*-stub.ts, compiled next to this file under
// dist/): one copy of each provider's behaviour, so what an operator tries is what CI checks.
import { startFalStub } from '../../test/fixtures/fal-stub.js'
import { startKieStub } from '../../test/fixtures/kie-stub.js'
import { startReplicateStub } from '../../test/fixtures/replicate-stub.js'

/**
 * `npm run stubs` (docs/providers.md "Testing against stubs"): starts local fal, Replicate and Kie stubs on
 * 127.0.0.1, writes a routing file that sends three video models to them, and prints the env
 * block that points the service at them (also written to DATA_DIR/stubs/env, for `set -a; .
 * data/stubs/env; set +a; npm start`). Runs until Ctrl-C / SIGTERM.
 */
const FINISH_MS = Number(process.env.STUBS_FINISH_MS ?? 3000)
const dir = resolve(process.env.DATA_DIR || './data', 'stubs')

const [fal, rep, kie] = await Promise.all([startFalStub(), startReplicateStub(), startKieStub()])
for (const stub of [fal, rep, kie]) {
  // Each job runs a little, then succeeds (callback first, polls reconcile a lost one).
  stub.defaults = { ...stub.defaults, steps: ['queued', 'running'], outcome: 'succeeded', media: 'mp4', finishAfterMs: FINISH_MS, callback: true }
}

/** veo3-fast on fal (Replicate behind it), kling-3.0 on Replicate, seedance-2-fast on Kie; every other model stays simulated. */
const routes = {
  comment: 'Written by npm run stubs: local provider stubs, not real providers.',
  routes: {
    'veo3-fast': [
      { provider: 'fal', model: 'fal-ai/veo3/fast', input: { prompt: '$.prompt', aspect_ratio: '$.aspect_ratio', duration: { from: '$.duration', suffix: 's', default: '8s' } } },
      { provider: 'replicate', model: 'google/veo-3-fast', input: { prompt: '$.prompt', aspect_ratio: '$.aspect_ratio' } },
    ],
    'kling-3.0': [{ provider: 'replicate', model: 'kwaivgi/kling-v2.1-master', input: { prompt: '$.prompt', aspect_ratio: '$.aspect_ratio', duration: { from: '$.duration', as: 'integer' } } }],
    'seedance-2-fast': [{ provider: 'kie', model: 'bytedance/v1-lite-text-to-video', input: { prompt: '$.prompt', duration: { from: '$.duration', as: 'string' } } }],
  },
}

await mkdir(dir, { recursive: true })
const providersFile = join(dir, 'providers.json')
await writeFile(providersFile, JSON.stringify(routes, null, 2) + '\n')

const env: Array<[string, string]> = [
  ['PROVIDERS_FILE', providersFile],
  ['FAL_KEY', fal.key],
  ['FAL_QUEUE_URL', fal.url],
  ['FAL_JWKS_URL', fal.jwksUrl],
  ['REPLICATE_API_TOKEN', rep.token],
  ['REPLICATE_API_URL', rep.url],
  ['REPLICATE_WEBHOOK_SECRET', rep.secret],
  ['KIE_API_KEY', kie.key],
  ['KIE_API_URL', kie.url],
  ['KIE_WEBHOOK_HMAC_KEY', kie.hmacKey],
  // The stubs are plain http on loopback: results are downloaded from them only when allowed.
  ['WEBHOOK_ALLOWLIST', [fal.url, rep.url, kie.url].map(u => new URL(u).host).join(',')],
]
const quote = (v: string) => `'${v.replace(/'/g, `'\\''`)}'`
const block = env.map(([k, v]) => `export ${k}=${quote(v)}`).join('\n')
const envFile = join(dir, 'env')
await writeFile(envFile, block.replace(/^export /gm, '') + '\n', { mode: 0o600 })

process.stdout.write(`# genjobs provider stubs (not real providers): fal ${fal.url}, Replicate ${rep.url}, Kie ${kie.url}
# veo3-fast -> fal, kling-3.0 -> Replicate, seedance-2-fast -> Kie; jobs succeed after ${FINISH_MS} ms.
# Start the service with this env (also in ${envFile}: set -a; . ${envFile}; set +a; npm start):
${block}
# stubs ready; Ctrl-C stops them
`)

for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    Promise.all([fal.close(), rep.close(), kie.close()]).then(() => process.exit(0), () => process.exit(1))
  })
}
// Every submission, one line as it arrives: what the service sent where.
for (const [name, stub] of [['fal', fal], ['replicate', rep], ['kie', kie]] as const) {
  const add = stub.addJob.bind(stub)
  stub.addJob = (id, model, input, callbackUrl) => {
    process.stdout.write(`${name}: job ${id} for ${model}: ${JSON.stringify(input)}\n`)
    return add(id, model, input, callbackUrl)
  }
}
