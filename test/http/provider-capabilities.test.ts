// Capability-aware routing (docs/providers.md "Capabilities") through the real service and the
// strict contract stubs: a request goes to the first route that serves every option value it
// carries; none: 422 UNSUPPORTED_OPTION naming the option and the values that can run, nothing
// charged, nothing sent upstream; GET /v1/models lists only served values.
import { writeFile, mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { startFalStub } from '../fixtures/fal-stub.js'
import { startReplicateStub } from '../fixtures/replicate-stub.js'
import { UNLIMITED_TIERS, balance, paidUser, pollJob } from '../helpers/jobs.js'
import { startServer } from '../helpers/server.js'

const fal = await startFalStub()
const rep = await startReplicateStub()
t.teardown(async () => { await fal.close(); await rep.close() })
fal.defaults = { ...fal.defaults, finishAfterMs: 30 }
rep.defaults = { ...rep.defaults, finishAfterMs: 30 }

const dir = await mkdtemp(join(tmpdir(), 'gjt-caps-'))
const routesFile = join(dir, 'providers.json')
await writeFile(routesFile, JSON.stringify({
  // Reconciliation polls 5 s after submission (not at the models' estimates) so jobs end within a test.
  providers: { fal: { reconcile_after_s: 1 }, replicate: { reconcile_after_s: 1 }, kie: { reconcile_after_s: 1 } },
  routes: {
    'kling-3.0': [
      { provider: 'fal', model: 'fal-ai/kling-video/v3/standard/text-to-video', input: { prompt: '$.prompt', aspect_ratio: '$.aspect_ratio', duration: '$.duration' } },
      { provider: 'fal', model: 'fal-ai/kling-video/v3/pro/text-to-video', serves: { mode: ['pro'] }, input: { prompt: '$.prompt', aspect_ratio: '$.aspect_ratio', duration: '$.duration' } },
      { provider: 'fal', model: 'fal-ai/kling-video/v3/standard/image-to-video', input: { prompt: '$.prompt', start_image_url: '$.image_url', duration: '$.duration' } },
    ],
    'minimax-h3': [
      { provider: 'replicate', model: 'minimax/hailuo-02', input: { prompt: '$.prompt', first_frame_image: '$.image_url', resolution: '$.resolution', duration: { from: '$.duration', as: 'integer' } } },
    ],
    'nano-banana': [
      { provider: 'fal', model: 'fal-ai/nano-banana', input: { prompt: '$.prompt', aspect_ratio: '$.aspect_ratio', output_format: '$.output_format' } },
      { provider: 'replicate', model: 'google/nano-banana', input: { prompt: '$.prompt', image_input: '$.image_urls', aspect_ratio: { from: '$.aspect_ratio', map: { auto: 'match_input_image' } } } },
    ],
  },
}))

const s = await startServer(t, {
  SHARDS: '1',
  TIER_LIMITS: UNLIMITED_TIERS,
  PROVIDERS_FILE: routesFile,
  FAL_KEY: fal.key,
  FAL_QUEUE_URL: fal.url,
  FAL_JWKS_URL: fal.jwksUrl,
  REPLICATE_API_TOKEN: rep.token,
  REPLICATE_API_URL: rep.url,
  WEBHOOK_ALLOWLIST: `${new URL(fal.url).host},${new URL(rep.url).host},images.example.com`,
})
const u = await paidUser(s, 100_000)
const submits = () => fal.requests.filter(q => q.route === 'submit').length + rep.requests.filter(q => q.route === 'submit').length

async function refused (t: any, kind: 'video' | 'image', body: Record<string, unknown>, param: string, values: RegExp) {
  const before = await balance(s, u)
  const sent = submits()
  const r = await s.req('POST', `/v1/generate/${kind}`, { key: u.key, body })
  t.equal(r.status, 422, r.text)
  t.equal(r.body.code, 'UNSUPPORTED_OPTION')
  t.equal(r.body.param, param)
  t.match(r.body.message, values)
  t.match(r.body.message, /Nothing was charged/)
  t.equal(await balance(s, u), before, 'nothing charged')
  t.equal(submits(), sent, 'nothing sent upstream')
}

async function ranOn (t: any, kind: 'video' | 'image', body: Record<string, unknown>): Promise<{ model: string; input: any }> {
  const media = kind === 'image' ? 'png' : 'mp4'
  fal.defaults = { ...fal.defaults, media }
  rep.defaults = { ...rep.defaults, media }
  const falBefore = new Set(fal.jobs.keys())
  const repBefore = new Set(rep.jobs.keys())
  const r = await s.req('POST', `/v1/generate/${kind}`, { key: u.key, body })
  t.equal(r.status, 201, r.text)
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 8000, everyMs: 40 })
  t.equal(job.status, 'completed', job.error_message ?? '')
  const up = [...fal.jobs.values()].find(j => !falBefore.has(j.id)) ?? [...rep.jobs.values()].find(j => !repBefore.has(j.id))
  return { model: up!.model, input: up!.input }
}

t.test('an option value outside every route\'s upstream enum is a 422 UNSUPPORTED_OPTION listing what can run', async (t) => {
  await refused(t, 'video', { model: 'kling-3.0', prompt: 'tall', aspect_ratio: '2:3' }, 'aspect_ratio', /values that can run: 16:9, 9:16, 1:1/)
  await refused(t, 'video', { model: 'minimax-h3', prompt: 'sharp', resolution: '2k' }, 'resolution', /values that can run: 768p/)
  await refused(t, 'video', { model: 'minimax-h3', prompt: 'long', duration: '15' }, 'duration', /values that can run: 6, 10/)
})

t.test('an option a route would drop is not served by it: the request goes to a route that takes it, or is refused', async (t) => {
  // Hailuo 02 has no aspect ratio field: 9:16 would be dropped.
  await refused(t, 'video', { model: 'minimax-h3', prompt: 'portrait', aspect_ratio: '9:16' }, 'aspect_ratio', /values that can run: 16:9/)
  // The image-to-video route has no aspect ratio either: a frame plus 9:16 cannot run anywhere.
  await refused(t, 'video', { model: 'kling-3.0', prompt: 'p', image_url: 'https://images.example.com/a.png', aspect_ratio: '9:16' }, 'aspect_ratio', /values that can run: 16:9/)
  // The Kling pro tier is its own endpoint: "serves" pins mode pro to it.
  const pro = await ranOn(t, 'video', { model: 'kling-3.0', prompt: 'pro tier', mode: 'pro', duration: '10' })
  t.equal(pro.model, 'fal-ai/kling-video/v3/pro/text-to-video')
  t.same(pro.input, { prompt: 'pro tier', aspect_ratio: '16:9', duration: '10' })
  const std = await ranOn(t, 'video', { model: 'kling-3.0', prompt: 'std tier', duration: '15' })
  t.equal(std.model, 'fal-ai/kling-video/v3/standard/text-to-video', 'the default request takes the first route')
  const frame = await ranOn(t, 'video', { model: 'kling-3.0', prompt: 'from a frame', image_url: 'https://images.example.com/a.png' })
  t.equal(frame.model, 'fal-ai/kling-video/v3/standard/image-to-video', 'a first frame goes to the route that reads it')
  t.equal(frame.input.start_image_url, 'https://images.example.com/a.png')
})

t.test('a value the first route\'s schema refuses goes to a later route whose mapping takes it', async (t) => {
  // fal's nano-banana has no "auto" aspect ratio; Replicate's maps it to match_input_image.
  const auto = await ranOn(t, 'image', { model: 'nano-banana', prompt: 'whatever shape', aspect_ratio: 'auto' })
  t.equal(auto.model, 'google/nano-banana')
  t.equal(auto.input.aspect_ratio, 'match_input_image')
  const plain = await ranOn(t, 'image', { model: 'nano-banana', prompt: 'square', output_format: 'jpeg' })
  t.equal(plain.model, 'fal-ai/nano-banana')
  // jpeg on Replicate's route would be dropped (it does not map output_format): with "auto" too, nothing serves.
  await refused(t, 'image', { model: 'nano-banana', prompt: 'p', aspect_ratio: 'auto', output_format: 'jpeg' }, 'aspect_ratio', /values that can run: 16:9, 9:16, 2:3, 3:2, 1:1/)
  t.equal(fal.refusals.length + rep.refusals.length, 0, 'no upstream ever refused an input')
})

t.test('GET /v1/models lists only the values some route serves; unrouted models keep the full catalogue', async (t) => {
  const r = await s.req('GET', '/v1/models')
  t.equal(r.status, 200)
  const v = (id: string) => r.body.video.find((m: any) => m.id === id)
  t.same(v('kling-3.0').aspect_ratios, ['16:9', '9:16', '1:1'])
  t.same(v('kling-3.0').modes, ['std', 'pro'])
  t.same(v('minimax-h3').durations, ['6', '10'])
  t.same(v('minimax-h3').resolutions, ['768p'])
  t.same(v('minimax-h3').aspect_ratios, ['16:9'])
  t.same(v('veo3-fast').aspect_ratios, ['16:9', '9:16'], 'simulated: as the catalogue')
  t.same(v('grok-video').durations, ['6', '10', '15', '20', '30'])
  const nb = r.body.image.find((m: any) => m.id === 'nano-banana')
  t.same(nb.aspect_ratios, ['16:9', '9:16', '2:3', '3:2', '1:1', 'auto'])
  t.same(nb.capabilities.output_formats, ['png', 'jpeg'])
  const again = await s.req('GET', '/v1/models', { headers: { 'if-none-match': r.headers.get('etag')! } })
  t.equal(again.status, 304, 'its own ETag revalidates')
})
