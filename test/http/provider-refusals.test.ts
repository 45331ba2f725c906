// Input refusals never count toward a route's breaker (docs/providers.md "Breakers"): a burst of
// inputs the upstream refuses (Replicate 422 invalid_fields, Kie body code 422) leaves the
// route's breaker closed and the next valid request is served; a burst of 5xx still opens it.
import { writeFile, mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { startKieStub } from '../fixtures/kie-stub.js'
import { startReplicateStub } from '../fixtures/replicate-stub.js'
import { UNLIMITED_TIERS, balance, paidUser, pollJob } from '../helpers/jobs.js'
import { startServer } from '../helpers/server.js'

const rep = await startReplicateStub()
const kie = await startKieStub()
t.teardown(async () => { await rep.close(); await kie.close() })

const dir = await mkdtemp(join(tmpdir(), 'gjt-refusals-'))
const routesFile = join(dir, 'providers.json')
await writeFile(routesFile, JSON.stringify({
  routes: {
    'grok-image': [{ provider: 'replicate', model: 'xai/grok-imagine-image', input: { prompt: '$.prompt' } }],
    'nano-banana': [{ provider: 'kie', model: 'grok-imagine/text-to-image', input: { prompt: '$.prompt' } }],
    'gpt-image-2': [{ provider: 'replicate', model: 'google/nano-banana', input: { prompt: '$.prompt' } }],
  },
}))

const s = await startServer(t, {
  SHARDS: '1',
  TIER_LIMITS: UNLIMITED_TIERS,
  PROVIDERS_FILE: routesFile,
  REPLICATE_API_TOKEN: rep.token,
  REPLICATE_API_URL: rep.url,
  KIE_API_KEY: kie.key,
  KIE_API_URL: kie.url,
  WEBHOOK_ALLOWLIST: `${new URL(rep.url).host},${new URL(kie.url).host}`,
})
const u = await paidUser(s, 100_000)

async function breakerOf (model: string): Promise<string> {
  const h = await s.req('GET', '/v1/admin/providers', { admin: true })
  return h.body.providers.find((p: any) => p.model === model).breaker
}

/** A burst of `n` creations the upstream refuses: each a 502 with nothing charged. */
async function burst (t: any, model: string, n: number): Promise<void> {
  const before = await balance(s, u)
  for (let i = 0; i < n; i++) {
    const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model, prompt: `refused ${i}` } })
    t.equal(r.status, 502, r.text)
    t.equal(r.body.code, 'PROVIDER_ERROR')
  }
  t.equal(await balance(s, u), before, 'nothing charged')
}

t.test('Replicate: eight 422 invalid_fields refusals in a row leave the breaker closed; a valid request is served', async (t) => {
  rep.fault({
    route: 'submit', status: 422, times: 8,
    body: { title: 'Input validation failed', detail: '- input.image: could not fetch the image\n', status: 422, invalid_fields: [{ type: 'format', field: 'input.image', description: 'could not fetch the image' }] },
  })
  await burst(t, 'grok-image', 8)
  t.equal(await breakerOf('grok-image'), 'closed', 'refused inputs are not route failures')
  rep.plan({ steps: ['running'], media: 'png', finishAfterMs: 50 })
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'grok-image', prompt: 'a valid one' } })
  t.equal(r.status, 201, r.text)
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 8000, everyMs: 50 })
  t.equal(job.status, 'completed')
})

t.test('Kie: eight body-code 422 refusals leave the breaker closed; a valid request is served', async (t) => {
  kie.fault({ route: 'submit', status: 200, times: 8, body: { code: 422, msg: 'image_urls: the image could not be downloaded' } })
  await burst(t, 'nano-banana', 8)
  t.equal(await breakerOf('nano-banana'), 'closed')
  kie.plan({ steps: ['running'], media: 'png', finishAfterMs: 50 })
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a valid one' } })
  t.equal(r.status, 201, r.text)
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 8000, everyMs: 50 })
  t.equal(job.status, 'completed')
})

t.test('by contrast, five 5xx answers in a row open the breaker: the next creation is refused without reaching the provider', async (t) => {
  rep.fault({ route: 'submit', status: 503, times: 5 })
  await burst(t, 'gpt-image-2', 5)
  t.equal(await breakerOf('gpt-image-2'), 'open')
  const sent = rep.requests.filter(q => q.route === 'submit').length
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'gpt-image-2', prompt: 'while open' } })
  t.equal(r.status, 502)
  t.equal(r.body.message, 'No provider can take this job right now; nothing was charged, try again later', 'every breaker open: the neutral "right now" message')
  t.equal(rep.requests.filter(q => q.route === 'submit').length, sent, 'not sent upstream')
})
