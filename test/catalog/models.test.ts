// The catalogue data against docs/api.md "Jobs", and the public bodies of
// GET /v1/models and GET /v1/credits/pricing (docs/api.md "Jobs").
import t from 'tap'
import { Ajv } from 'ajv'
import addFormatsModule from 'ajv-formats'
import {
  AUDIO_MODEL_IDS, IMAGE_MODEL_IDS, SPEC_SCHEMA_VIDEO_MODEL_IDS, VIDEO_MODEL_IDS, VIDEO_MODELS, videoModel, isExtendableModel,
} from '../../src/catalog/models.js'
import {
  MODELS_ETAG, modelsResponse, PRICING_ETAG, PRICING_VERSION, pricingResponse, etagOf, pricingVersion,
} from '../../src/catalog/index.js'
import {
  AudioRequest, BatchRequest, CreatedJob, ExtendRequest, ImageRequest, Job, ModelsResponse, PricingResponse, VideoRequest,
} from '../../src/catalog/schemas.js'
import { routes } from '../../src/http/routes/catalog.js'
import type { RouteContext } from '../../src/http/route.js'

const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default
const PRICE_DESCRIPTORS = ['credits', 'credits_by_resolution_and_duration', 'credits_by_mode_and_duration', 'credits_by_resolution', 'credits_by_duration', 'pricing']
type Entry = Record<string, unknown>

t.test('the catalogue holds 15 video, 6 image and 2 audio models', async t => {
  t.same([...VIDEO_MODEL_IDS], [
    'veo3-fast', 'veo3-quality', 'grok-video', 'kling-3.0', 'seedance-2-fast', 'seedance-2', 'seedance-2-mini', 'seedance-2.5',
    'wan-3.0', 'wan-3.0-prime', 'minimax-h3', 'seedance-1.5-pro', 'seedance-v1-pro', 'gemini-omni', 'lipsync',
  ])
  t.same([...IMAGE_MODEL_IDS], ['nano-banana', 'nano-banana-pro', 'nano-banana-2.1', 'grok-image', 'gpt-image-2', 'gpt-image-2.5'])
  t.same([...AUDIO_MODEL_IDS], ['voiceover', 'music'])
  t.equal(SPEC_SCHEMA_VIDEO_MODEL_IDS.length, 12, 'the SPEC request-schema enum holds 12')
  t.notOk(SPEC_SCHEMA_VIDEO_MODEL_IDS.includes('wan-3.0'))
})

t.test('the request schemas (and so the OpenAPI enums) list every catalogue id', async t => {
  t.same((VideoRequest.properties.model as unknown as { enum: string[] }).enum, [...VIDEO_MODEL_IDS])
  t.same((ImageRequest.properties.model as unknown as { enum: string[] }).enum, [...IMAGE_MODEL_IDS])
  t.same((AudioRequest.properties.model as unknown as { enum: string[] }).enum, [...AUDIO_MODEL_IDS])
  t.notOk('$id' in VideoRequest, 'schemas carry no $id so they embed in OpenAPI as they are')
})

t.test('every video model has the options of its SPEC.md 4.3 row', async t => {
  // [id, aspect ratios, durations, resolutions, modes, prompt cap, estimated_seconds]
  const rows: Array<[string, string[], string[], string[], string[], number, number]> = [
    ['veo3-fast', ['16:9', '9:16'], [], [], [], 10000, 110],
    ['veo3-quality', ['16:9', '9:16'], [], [], [], 10000, 110],
    ['grok-video', ['16:9', '9:16', '2:3', '3:2', '1:1'], ['6', '10', '15', '20', '30'], ['480p', '720p'], ['fun', 'normal', 'spicy'], 5000, 100],
    ['kling-3.0', ['16:9', '9:16', '2:3', '3:2', '1:1'], ['6', '10', '15'], [], ['std', 'pro'], 2500, 165],
    ['seedance-2-fast', ['16:9', '9:16', '2:3', '3:2', '1:1'], ['6', '10', '15'], ['480p', '720p'], [], 20000, 195],
    ['seedance-2', ['16:9', '9:16', '2:3', '3:2', '1:1'], ['6', '10', '15'], ['480p', '720p', '1080p', '4k'], [], 20000, 350],
    ['seedance-2-mini', ['16:9', '4:3', '1:1', '3:4', '9:16', '21:9', 'adaptive'], ['6', '10', '15'], ['480p', '720p'], [], 20000, 240],
    ['seedance-2.5', ['16:9', '4:3', '1:1', '3:4', '9:16', '21:9', 'adaptive'], ['6', '10', '15', '20', '30'], ['480p', '720p'], [], 20000, 235],
    ['wan-3.0', ['16:9', '4:3', '1:1', '3:4', '9:16', 'adaptive'], ['6', '10', '15', '20', '30'], ['480p', '720p', '1080p'], [], 20000, 270],
    ['wan-3.0-prime', ['16:9', '4:3', '1:1', '3:4', '9:16', 'adaptive'], ['6', '10', '15', '20', '30'], ['480p', '720p', '1080p'], [], 20000, 180],
    ['minimax-h3', ['21:9', '16:9', '4:3', '1:1', '3:4', '9:16', 'adaptive'], ['6', '10', '15'], ['768p', '2k'], [], 7000, 150],
    ['seedance-1.5-pro', ['16:9', '9:16', '2:3', '3:2', '1:1'], ['4', '8', '12'], ['480p', '720p'], [], 20000, 130],
    ['seedance-v1-pro', ['16:9', '9:16', '2:3', '3:2', '1:1'], ['5', '10'], ['480p', '720p'], [], 20000, 65],
    ['gemini-omni', ['16:9', '9:16'], ['4', '6', '8', '10'], ['1080p', '4k'], [], 20000, 220],
    ['lipsync', [], [], ['480p', '720p'], [], 5000, 695],
  ]
  t.equal(rows.length, VIDEO_MODELS.length)
  for (const [id, ar, durations, resolutions, modes, cap, est] of rows) {
    const m = videoModel(id)
    if (!m) { t.fail(`${id} missing`); continue }
    t.same([...m.aspectRatios], ar, `${id} aspect ratios`)
    t.same([...m.durations], durations, `${id} durations`)
    t.same([...m.resolutions], resolutions, `${id} resolutions`)
    t.same([...m.modes], modes, `${id} modes`)
    t.equal(m.promptCap, cap, `${id} prompt cap`)
    t.equal(m.estimatedSeconds, est, `${id} estimated_seconds`)
  }
})

t.test('only veo3-fast and veo3-quality are extendable', async t => {
  t.same(VIDEO_MODELS.filter(m => m.extendable).map(m => m.id), ['veo3-fast', 'veo3-quality'])
  t.ok(isExtendableModel('veo3-quality'))
  t.notOk(isExtendableModel('seedance-2'))
  t.notOk(isExtendableModel('nope'))
})

t.test('GET /v1/models has the SPEC.md 4.1 shape', async t => {
  t.same(Object.keys(modelsResponse).sort(), ['audio', 'extend', 'image', 'supported_model_ids', 'version', 'video'])
  t.same(modelsResponse.supported_model_ids, { video: [...VIDEO_MODEL_IDS], image: [...IMAGE_MODEL_IDS], audio: [...AUDIO_MODEL_IDS] })
  t.same(modelsResponse.video.map(e => e.id), [...VIDEO_MODEL_IDS])
  t.same(modelsResponse.image.map(e => e.id), [...IMAGE_MODEL_IDS])
  t.same(modelsResponse.audio.map(e => e.id), [...AUDIO_MODEL_IDS])
  t.match(modelsResponse.extend, { models: ['veo3-fast', 'veo3-quality'], credits: 120, description: String })
  t.equal(modelsResponse.version, PRICING_VERSION)
})

t.test('every catalogue entry has exactly one price descriptor, status available, features and capabilities', async t => {
  for (const e of [...modelsResponse.video, ...modelsResponse.image, ...modelsResponse.audio] as Entry[]) {
    const descriptors = PRICE_DESCRIPTORS.filter(k => k in e)
    t.equal(descriptors.length, 1, `${e.id} has one price descriptor (${descriptors.join(', ')})`)
    t.equal(e.status, 'available', `${e.id} is available`)
    t.ok(Array.isArray(e.features) && (e.features as unknown[]).length > 0, `${e.id} lists features`)
    t.ok(e.capabilities && typeof e.capabilities === 'object', `${e.id} has capabilities`)
    t.ok(Number.isInteger(e.estimated_seconds) && (e.estimated_seconds as number) > 0, `${e.id} has estimated_seconds`)
    t.type(e.name, 'string')
    t.type(e.provider, 'string')
  }
})

t.test('catalogue entries publish the SPEC.md prices', async t => {
  const byId = (list: readonly unknown[], id: string) => (list as Entry[]).find(e => e.id === id) as Entry
  t.equal(byId(modelsResponse.video, 'veo3-fast').credits, 120)
  t.equal(byId(modelsResponse.video, 'veo3-quality').credits, 320)
  t.same(byId(modelsResponse.video, 'kling-3.0').credits_by_mode_and_duration, { std: { 6: 225, 10: 300, 15: 450 }, pro: { 6: 300, 10: 450, 15: 600 } })
  t.same(byId(modelsResponse.video, 'seedance-v1-pro').credits_by_resolution_and_duration, { '480p': { 5: 30, 10: 50 }, '720p': { 5: 60, 10: 100 } })
  t.same(byId(modelsResponse.video, 'minimax-h3').reference_video_surcharge, { '768p': 240, '2k': 380 })
  t.notOk('reference_video_surcharge' in byId(modelsResponse.video, 'grok-video'))
  t.match(byId(modelsResponse.video, 'lipsync').pricing, {
    included_seconds: 5,
    normal: { max_seconds: 15, by_resolution: { '480p': { base: 60, per_second: 5 }, '720p': { base: 150, per_second: 20 } } },
    collate: { max_seconds: 120 },
    trim: { flat_by_resolution: { '480p': 110, '720p': 300 } },
  })
  t.same(byId(modelsResponse.image, 'nano-banana-2.1').credits_by_resolution, { '1K': 8, '2K': 12, '4K': 18 })
  t.equal(byId(modelsResponse.image, 'grok-image').credits, 20)
  t.same(byId(modelsResponse.audio, 'voiceover').credits_by_duration, { 15: 20, 30: 40, 60: 80, 120: 150, 300: 300 })
  t.equal(byId(modelsResponse.audio, 'music').credits, 50)
})

t.test('GET /v1/credits/pricing has every price, the credit packs and the free trial', async t => {
  t.equal(pricingResponse.version, PRICING_VERSION)
  t.equal(pricingResponse.unit, 'credits')
  t.same(Object.keys(pricingResponse.video), [...VIDEO_MODEL_IDS])
  t.same(Object.keys(pricingResponse.image), [...IMAGE_MODEL_IDS])
  t.same(Object.keys(pricingResponse.audio), [...AUDIO_MODEL_IDS])
  t.match(pricingResponse.video['seedance-2'], { credits_by_resolution_and_duration: { '4k': { 15: 5000 } }, reference_video_surcharge: { '4k': 1000 } })
  t.match(pricingResponse.extend, { credits: 120, models: ['veo3-fast', 'veo3-quality'] })
  t.same(pricingResponse.credit_packs, [
    { currency: 'USD', credits: 600, amount: 5 },
    { currency: 'USD', credits: 3000, amount: 19 },
    { currency: 'USD', credits: 9000, amount: 49 },
    { currency: 'USD', credits: 20000, amount: 99 },
    { currency: 'INR', credits: 400, amount: 299 },
    { currency: 'INR', credits: 3000, amount: 1999 },
    { currency: 'INR', credits: 20000, amount: 9999 },
  ])
  t.same(pricingResponse.free_trial, { credits: 200, videos: 1 })
})

t.test('the response bodies match their published schemas', async t => {
  const ajv = new Ajv({ allErrors: true, strict: true })
  addFormats(ajv)
  const models = ajv.compile(ModelsResponse)
  t.ok(models(modelsResponse), JSON.stringify(models.errors))
  const pricing = ajv.compile(PricingResponse)
  t.ok(pricing(pricingResponse), JSON.stringify(pricing.errors))
  for (const [name, schema] of Object.entries({ BatchRequest, CreatedJob, Job, ExtendRequest })) {
    t.doesNotThrow(() => ajv.compile(schema), `${name} compiles under Ajv strict mode`)
  }
  const job = ajv.compile(Job)
  t.ok(job({ id: 'job_1', status: 'completed', type: 'video', model: 'veo3-fast', result_url: 'https://x/y.mp4', completed_at: '2025-01-01T00:00:00Z', credits_refunded: 0, estimated_seconds: 110 }))
  t.notOk(job({ id: 'job_1', status: 'done', type: 'video', model: 'veo3-fast' }), 'an unknown status is not a Job')
  const created = ajv.compile(CreatedJob)
  t.ok(created({ id: 'job_1', status: 'submitted', model: 'veo3-fast', credits_charged: 120, remaining_credits: 80, estimated_seconds: 110 }))
  t.notOk(created({ id: 'job_1', status: 'submitted', model: 'veo3-fast' }), 'credits_charged is required')
})

t.test('the pricing version is a hash of the price data: stable, and changed by any price change', async t => {
  const { version: _v, ...data } = structuredClone(pricingResponse) as Record<string, any>
  t.equal(pricingVersion(data), PRICING_VERSION, 'recomputable from the published table')
  const reordered = Object.fromEntries(Object.entries(data).reverse())
  t.equal(pricingVersion(reordered), PRICING_VERSION, 'key order does not matter')
  const cheaper = structuredClone(data)
  cheaper.video['seedance-2'].credits_by_resolution_and_duration['4k']['15'] = 4999
  t.not(pricingVersion(cheaper), PRICING_VERSION, 'one video cell changes the version')
  const pack = structuredClone(data)
  pack.credit_packs[0].amount = 6
  t.not(pricingVersion(pack), PRICING_VERSION, 'a pack price changes the version')
  const voice = structuredClone(data)
  voice.audio.voiceover.credits_by_duration['300'] = 301
  t.not(pricingVersion(voice), PRICING_VERSION, 'a voiceover band changes the version')
})

t.test('the bodies carry strong ETags of their JSON and cannot be modified', async t => {
  t.match(MODELS_ETAG, /^"[0-9a-f]{64}"$/)
  t.match(PRICING_ETAG, /^"[0-9a-f]{64}"$/)
  t.equal(MODELS_ETAG, etagOf(JSON.parse(JSON.stringify(modelsResponse))))
  t.equal(PRICING_ETAG, etagOf(JSON.parse(JSON.stringify(pricingResponse))))
  t.not(MODELS_ETAG, PRICING_ETAG)
  t.ok(Object.isFrozen(modelsResponse) && Object.isFrozen(modelsResponse.video[0]) && Object.isFrozen(pricingResponse.credit_packs[0]))
  t.throws(() => { (pricingResponse.credit_packs[0] as { amount: number }).amount = 1 }, TypeError)
  t.throws(() => { (VIDEO_MODELS[0] as { estimatedSeconds: number }).estimatedSeconds = 1 }, TypeError)
})

t.test('GET /v1/models and GET /v1/credits/pricing are public, cacheable and return the same body object', async t => {
  const ctx = {} as RouteContext
  const models = routes.find(r => r.method === 'GET' && r.path === '/v1/models')
  const pricing = routes.find(r => r.method === 'GET' && r.path === '/v1/credits/pricing')
  if (!models || !pricing) { t.fail('routes missing'); return }
  for (const [route, body, etag, schema] of [
    [models, modelsResponse, MODELS_ETAG, ModelsResponse], [pricing, pricingResponse, PRICING_ETAG, PricingResponse]
  ] as const) {
    t.equal(route.auth, 'public')
    t.equal(route.schema?.response?.[200], schema)
    const a = await route.handler(ctx)
    const b = await route.handler(ctx)
    t.equal(a.body, body, 'the frozen body itself')
    t.equal(a.body, b.body, 'the same object on every call')
    t.equal(a.etag, etag)
    t.equal(a.headers?.['Cache-Control'], 'public, max-age=60')
    t.equal(a.status ?? 200, 200)
  }
})
