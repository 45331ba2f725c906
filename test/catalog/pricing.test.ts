// Every price cell of docs/api.md "Jobs", written out literally from the spec and
// checked twice: through priceVideo/priceImage/priceAudio directly, and through the
// validators (the path a real request takes: schema, normalisation, defaults, price).
import t from 'tap'
import {
  priceAudio, priceExtend, priceImage, priceVideo, lipsyncBilledSeconds, spokenSeconds,
} from '../../src/catalog/pricing.js'
import { validateAudio, validateExtend, validateImage, validateVideo } from '../../src/catalog/validate.js'

const IMG = 'https://cdn.example.com/a.png'
const AUD = 'https://cdn.example.com/a.mp3'
const VID = 'https://cdn.example.com/a.mp4'

/** The smallest valid body of each model besides the priced options. */
function baseBody (model: string): Record<string, unknown> {
  if (model === 'gemini-omni') return { model, prompt: 'a scene', voice_asset_ids: [1], character_asset_ids: [2] }
  if (model === 'lipsync') return { model, image_url: IMG, audio_url: AUD, audio_duration: 5 }
  return { model, prompt: 'a scene' }
}

// [model, resolution, duration, credits] straight from the docs/api.md "Jobs" table.
const RESOLUTION_DURATION: Array<[string, string, string, number]> = [
  ['grok-video', '480p', '6', 60], ['grok-video', '480p', '10', 90], ['grok-video', '480p', '15', 120], ['grok-video', '480p', '20', 140], ['grok-video', '480p', '30', 160],
  ['grok-video', '720p', '6', 80], ['grok-video', '720p', '10', 120], ['grok-video', '720p', '15', 150], ['grok-video', '720p', '20', 180], ['grok-video', '720p', '30', 280],
  ['seedance-2-fast', '480p', '6', 150], ['seedance-2-fast', '480p', '10', 200], ['seedance-2-fast', '480p', '15', 300],
  ['seedance-2-fast', '720p', '6', 350], ['seedance-2-fast', '720p', '10', 500], ['seedance-2-fast', '720p', '15', 650],
  ['seedance-2', '480p', '6', 220], ['seedance-2', '480p', '10', 350], ['seedance-2', '480p', '15', 500],
  ['seedance-2', '720p', '6', 450], ['seedance-2', '720p', '10', 600], ['seedance-2', '720p', '15', 900],
  ['seedance-2', '1080p', '6', 900], ['seedance-2', '1080p', '10', 1600], ['seedance-2', '1080p', '15', 2500],
  ['seedance-2', '4k', '6', 2000], ['seedance-2', '4k', '10', 3000], ['seedance-2', '4k', '15', 5000],
  ['seedance-2-mini', '480p', '6', 50], ['seedance-2-mini', '480p', '10', 80], ['seedance-2-mini', '480p', '15', 120],
  ['seedance-2-mini', '720p', '6', 100], ['seedance-2-mini', '720p', '10', 150], ['seedance-2-mini', '720p', '15', 210],
  ['seedance-2.5', '480p', '6', 300], ['seedance-2.5', '480p', '10', 400], ['seedance-2.5', '480p', '15', 600], ['seedance-2.5', '480p', '20', 750], ['seedance-2.5', '480p', '30', 1000],
  ['seedance-2.5', '720p', '6', 600], ['seedance-2.5', '720p', '10', 800], ['seedance-2.5', '720p', '15', 1600], ['seedance-2.5', '720p', '20', 1800], ['seedance-2.5', '720p', '30', 3000],
  ['wan-3.0', '480p', '6', 80], ['wan-3.0', '480p', '10', 160], ['wan-3.0', '480p', '15', 240], ['wan-3.0', '480p', '20', 320], ['wan-3.0', '480p', '30', 480],
  ['wan-3.0', '720p', '6', 180], ['wan-3.0', '720p', '10', 320], ['wan-3.0', '720p', '15', 480], ['wan-3.0', '720p', '20', 640], ['wan-3.0', '720p', '30', 960],
  ['wan-3.0', '1080p', '6', 380], ['wan-3.0', '1080p', '10', 640], ['wan-3.0', '1080p', '15', 960], ['wan-3.0', '1080p', '20', 1280], ['wan-3.0', '1080p', '30', 1920],
  ['wan-3.0-prime', '480p', '6', 140], ['wan-3.0-prime', '480p', '10', 240], ['wan-3.0-prime', '480p', '15', 360], ['wan-3.0-prime', '480p', '20', 480], ['wan-3.0-prime', '480p', '30', 720],
  ['wan-3.0-prime', '720p', '6', 300], ['wan-3.0-prime', '720p', '10', 500], ['wan-3.0-prime', '720p', '15', 740], ['wan-3.0-prime', '720p', '20', 1000], ['wan-3.0-prime', '720p', '30', 1500],
  ['wan-3.0-prime', '1080p', '6', 600], ['wan-3.0-prime', '1080p', '10', 1000], ['wan-3.0-prime', '1080p', '15', 1500], ['wan-3.0-prime', '1080p', '20', 2000], ['wan-3.0-prime', '1080p', '30', 3020],
  ['minimax-h3', '768p', '6', 80], ['minimax-h3', '768p', '10', 160], ['minimax-h3', '768p', '15', 240],
  ['minimax-h3', '2k', '6', 140], ['minimax-h3', '2k', '10', 260], ['minimax-h3', '2k', '15', 380],
  ['seedance-1.5-pro', '480p', '4', 30], ['seedance-1.5-pro', '480p', '8', 60], ['seedance-1.5-pro', '480p', '12', 80],
  ['seedance-1.5-pro', '720p', '4', 60], ['seedance-1.5-pro', '720p', '8', 100], ['seedance-1.5-pro', '720p', '12', 150],
  ['seedance-v1-pro', '480p', '5', 30], ['seedance-v1-pro', '480p', '10', 50],
  ['seedance-v1-pro', '720p', '5', 60], ['seedance-v1-pro', '720p', '10', 100],
  ['gemini-omni', '1080p', '4', 120], ['gemini-omni', '1080p', '6', 160], ['gemini-omni', '1080p', '8', 200], ['gemini-omni', '1080p', '10', 240],
  ['gemini-omni', '4k', '4', 250], ['gemini-omni', '4k', '6', 300], ['gemini-omni', '4k', '8', 350], ['gemini-omni', '4k', '10', 400],
]

t.test('every resolution x duration cell of SPEC.md 4.3 has its literal price', async t => {
  for (const [model, resolution, duration, credits] of RESOLUTION_DURATION) {
    t.equal(priceVideo({ model, resolution, duration }), credits, `priceVideo ${model} ${resolution} ${duration}s = ${credits}`)
    t.equal(validateVideo({ ...baseBody(model), resolution, duration }).credits, credits, `POST /generate/video ${model} ${resolution} ${duration}s charges ${credits}`)
  }
})

t.test('upper-case resolutions cost the same as lower-case ones', async t => {
  t.equal(validateVideo({ model: 'seedance-2', prompt: 'p', resolution: '4K', duration: '15' }).credits, 5000)
  t.equal(validateVideo({ model: 'seedance-2', prompt: 'p', resolution: '1080P', duration: '6' }).credits, 900)
  t.equal(validateVideo({ model: 'minimax-h3', prompt: 'p', resolution: '2K', duration: '10' }).credits, 260)
  t.equal(validateVideo({ model: 'grok-video', prompt: 'p', resolution: '720P', duration: '30' }).credits, 280)
  t.equal(priceVideo({ model: 'wan-3.0', resolution: '1080P', duration: '30' }), 1920)
})

// [model, mode, duration, credits] for kling-3.0 (docs/api.md "Jobs").
const MODE_DURATION: Array<[string, string, string, number]> = [
  ['kling-3.0', 'std', '6', 225], ['kling-3.0', 'std', '10', 300], ['kling-3.0', 'std', '15', 450],
  ['kling-3.0', 'pro', '6', 300], ['kling-3.0', 'pro', '10', 450], ['kling-3.0', 'pro', '15', 600],
]

t.test('every mode x duration cell of kling-3.0 has its literal price', async t => {
  for (const [model, mode, duration, credits] of MODE_DURATION) {
    t.equal(priceVideo({ model, mode, duration }), credits, `priceVideo ${model} ${mode} ${duration}s = ${credits}`)
    t.equal(validateVideo({ model, prompt: 'p', mode, duration }).credits, credits, `POST /generate/video ${model} ${mode} ${duration}s charges ${credits}`)
  }
})

t.test('grok-video mode does not change the price', async t => {
  for (const mode of ['fun', 'normal', 'spicy']) {
    t.equal(validateVideo({ model: 'grok-video', prompt: 'p', mode, resolution: '720p', duration: '20' }).credits, 180, mode)
  }
})

t.test('veo3 models are flat: veo3-fast 120, veo3-quality 320', async t => {
  t.equal(priceVideo({ model: 'veo3-fast' }), 120)
  t.equal(priceVideo({ model: 'veo3-quality' }), 320)
  t.equal(validateVideo({ model: 'veo3-fast', prompt: 'p', aspect_ratio: '9:16' }).credits, 120)
  t.equal(validateVideo({ model: 'veo3-quality', prompt: 'p', image_url: IMG, last_frame_url: IMG }).credits, 320)
})

// [model, resolution, duration, base, surcharge]: the price with reference videos is base + surcharge.
const SURCHARGES: Array<[string, string, string, number, number]> = [
  ['seedance-2-fast', '480p', '6', 150, 50], ['seedance-2-fast', '720p', '15', 650, 100],
  ['seedance-2', '480p', '6', 220, 100], ['seedance-2', '720p', '10', 600, 200], ['seedance-2', '1080p', '15', 2500, 600], ['seedance-2', '4k', '6', 2000, 1000],
  ['seedance-2-mini', '480p', '10', 80, 20], ['seedance-2-mini', '720p', '15', 210, 50],
  ['seedance-2.5', '480p', '30', 1000, 150], ['seedance-2.5', '720p', '6', 600, 350],
  ['wan-3.0', '480p', '6', 80, 240], ['wan-3.0', '720p', '10', 320, 480], ['wan-3.0', '1080p', '15', 960, 960],
  ['wan-3.0-prime', '480p', '6', 140, 360], ['wan-3.0-prime', '720p', '10', 500, 740], ['wan-3.0-prime', '1080p', '15', 1500, 1500],
  ['minimax-h3', '768p', '6', 80, 240], ['minimax-h3', '2k', '15', 380, 380],
]

t.test('every reference-video surcharge of SPEC.md 4.3 is added once per request', async t => {
  for (const [model, resolution, duration, base, surcharge] of SURCHARGES) {
    t.equal(priceVideo({ model, resolution, duration, reference_video_urls: [VID] }), base + surcharge, `${model} ${resolution} ${duration}s with a reference video = ${base} + ${surcharge}`)
    const one = validateVideo({ model, prompt: 'p', resolution, duration, reference_video_urls: [VID] })
    t.equal(one.credits, base + surcharge, `POST /generate/video ${model} ${resolution} with one reference video`)
    const many = validateVideo({ model, prompt: 'p', resolution, duration, reference_video_urls: [VID, VID, VID] })
    t.equal(many.credits, base + surcharge, `three reference videos cost the same surcharge as one (${model} ${resolution})`)
    t.equal(validateVideo({ model, prompt: 'p', resolution, duration, reference_image_urls: [IMG] }).credits, base, `reference images alone add nothing (${model})`)
  }
})

t.test('gemini-omni with its one reference video has no surcharge (none in SPEC.md)', async t => {
  const r = validateVideo({ ...baseBody('gemini-omni'), resolution: '4k', duration: '10', reference_video_urls: [VID] })
  t.equal(r.credits, 400)
})

t.test('lipsync normal and collate: base + per second x (seconds - 5), trim flat', async t => {
  // [mode, resolution, audio_duration, credits]
  const cells: Array<[string, string, number, number]> = [
    ['normal', '480p', 0.1, 60], ['normal', '480p', 1, 60], ['normal', '480p', 5, 60], ['normal', '480p', 5.01, 65],
    ['normal', '480p', 6, 65], ['normal', '480p', 10, 85], ['normal', '480p', 14.2, 110], ['normal', '480p', 15, 110],
    ['normal', '720p', 5, 150], ['normal', '720p', 6, 170], ['normal', '720p', 10, 250], ['normal', '720p', 15, 350],
    ['collate', '480p', 4, 60], ['collate', '480p', 5, 60], ['collate', '480p', 16, 115], ['collate', '480p', 60, 335],
    ['collate', '480p', 119.5, 635], ['collate', '480p', 120, 635],
    ['collate', '720p', 5, 150], ['collate', '720p', 16, 370], ['collate', '720p', 120, 2450],
    ['trim', '480p', 1, 110], ['trim', '480p', 15, 110], ['trim', '480p', 120, 110],
    ['trim', '720p', 1, 300], ['trim', '720p', 60, 300], ['trim', '720p', 120, 300],
  ]
  for (const [mode, resolution, seconds, credits] of cells) {
    const lip = mode as 'normal' | 'trim' | 'collate'
    t.equal(priceVideo({ model: 'lipsync', lip_sync_mode: lip, resolution, audio_duration: seconds }), credits, `priceVideo lipsync ${mode} ${resolution} ${seconds}s = ${credits}`)
    t.equal(validateVideo({ model: 'lipsync', image_url: IMG, audio_url: AUD, audio_duration: seconds, lip_sync_mode: mode, resolution }).credits, credits,
      `POST /generate/video lipsync ${mode} ${resolution} ${seconds}s charges ${credits}`)
  }
})

t.test('lipsync defaults to normal mode at 480p', async t => {
  const r = validateVideo({ model: 'lipsync', image_url: IMG, audio_url: AUD, audio_duration: 10 })
  t.equal(r.lip_sync_mode, 'normal')
  t.equal(r.resolution, '480p')
  t.equal(r.credits, 85)
})

t.test('lipsync billed seconds are audio_duration rounded up, at least 5', async t => {
  t.equal(lipsyncBilledSeconds(0.5), 5)
  t.equal(lipsyncBilledSeconds(5), 5)
  t.equal(lipsyncBilledSeconds(5.0001), 6)
  t.equal(lipsyncBilledSeconds(119.2), 120)
})

t.test('lipsync over the mode cap is 422 UNSUPPORTED_OPTION param audio_duration', async t => {
  t.throws(() => priceVideo({ model: 'lipsync', lip_sync_mode: 'normal', audio_duration: 15.5 }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'audio_duration' } })
  t.throws(() => priceVideo({ model: 'lipsync', lip_sync_mode: 'collate', audio_duration: 121 }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'audio_duration' } })
  t.throws(() => priceVideo({ model: 'lipsync', lip_sync_mode: 'normal' }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'audio_duration' } })
})

t.test('voiceover is priced by estimated spoken seconds at 15 characters per second', async t => {
  // [characters, seconds, credits]: both sides of every band edge (15/30/60/120/300 s).
  const cells: Array<[number, number, number]> = [
    [1, 1, 20], [15, 1, 20], [16, 2, 20], [225, 15, 20],
    [226, 16, 40], [450, 30, 40],
    [451, 31, 80], [900, 60, 80],
    [901, 61, 150], [1800, 120, 150],
    [1801, 121, 300], [4500, 300, 300],
  ]
  for (const [chars, seconds, credits] of cells) {
    const text = 'a'.repeat(chars)
    t.equal(spokenSeconds(text), seconds, `${chars} characters are ${seconds} seconds`)
    t.equal(priceAudio({ model: 'voiceover', text }), credits, `priceAudio voiceover ${chars} characters = ${credits}`)
    const r = validateAudio({ model: 'voiceover', text, voice_id: 'v1' })
    t.equal(r.credits, credits, `POST /generate/audio voiceover ${chars} characters charges ${credits}`)
    t.equal(r.spoken_seconds, seconds)
  }
})

t.test('voiceover characters are code points: 225 emoji are 15 seconds', async t => {
  t.equal(validateAudio({ model: 'voiceover', text: '\u{1F600}'.repeat(225), voice_id: 'v' }).credits, 20)
  t.equal(validateAudio({ model: 'voiceover', text: '\u{1F600}'.repeat(226), voice_id: 'v' }).credits, 40)
})

t.test('voiceover estimated over 300 seconds answers 422 UNSUPPORTED_OPTION param text', async t => {
  t.throws(() => priceAudio({ model: 'voiceover', text: 'a'.repeat(4501) }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'text' } })
  t.throws(() => validateAudio({ model: 'voiceover', text: 'a'.repeat(4501), voice_id: 'v' }), { code: 'UNSUPPORTED_OPTION', status: 422, extra: { param: 'text' } })
  t.throws(() => validateAudio({ model: 'voiceover', text: 'a'.repeat(5000), voice_id: 'v' }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'text' } })
})

t.test('music is 50 credits flat', async t => {
  t.equal(priceAudio({ model: 'music' }), 50)
  t.equal(validateAudio({ model: 'music', instrumental: true, style: 'lofi' }).credits, 50)
  t.equal(validateAudio({ model: 'music', lyrics: 'la la la', title: 'Song' }).credits, 50)
})

t.test('image prices per model and resolution (SPEC.md 4.4)', async t => {
  // [model, resolution or null, credits]
  const cells: Array<[string, string | null, number]> = [
    ['nano-banana', null, 10],
    ['nano-banana-pro', null, 30],
    ['nano-banana-2.1', '1K', 8], ['nano-banana-2.1', '2K', 12], ['nano-banana-2.1', '4K', 18],
    ['grok-image', null, 20],
    ['gpt-image-2', '1K', 10], ['gpt-image-2', '2K', 20], ['gpt-image-2', '4K', 30],
    ['gpt-image-2.5', '1K', 10], ['gpt-image-2.5', '2K', 20], ['gpt-image-2.5', '4K', 40],
  ]
  for (const [model, resolution, credits] of cells) {
    t.equal(priceImage({ model, resolution }), credits, `priceImage ${model} ${resolution ?? 'flat'} = ${credits}`)
    const body: Record<string, unknown> = { model, prompt: 'a cat' }
    if (resolution) body.resolution = resolution
    t.equal(validateImage(body).credits, credits, `POST /generate/image ${model} ${resolution ?? ''} charges ${credits}`)
    if (resolution) t.equal(validateImage({ ...body, resolution: resolution.toLowerCase() }).credits, credits, `lower-case ${resolution.toLowerCase()} costs the same`)
    t.equal(validateImage({ ...body, image_urls: [IMG, IMG] }).credits, credits, `${model} edit mode costs the same`)
  }
})

t.test('grok-image is 20 per batch whatever else is sent', async t => {
  t.equal(validateImage({ model: 'grok-image', prompt: 'p', aspect_ratio: '16:9', output_format: 'jpeg', image_urls: [IMG, IMG, IMG, IMG, IMG] }).credits, 20)
})

t.test('extend is 120 flat', async t => {
  t.equal(priceExtend(), 120)
  t.equal(validateExtend({ job_id: 'job_abc', prompt: 'continue' }).credits, 120)
})

t.test('omitted options take the documented defaults and their price', async t => {
  // [model, credits of a request that sends only what the model requires]
  const cells: Array<[string, number]> = [
    ['veo3-fast', 120], ['veo3-quality', 320], ['grok-video', 60], ['kling-3.0', 225],
    ['seedance-2-fast', 150], ['seedance-2', 220], ['seedance-2-mini', 50], ['seedance-2.5', 300],
    ['wan-3.0', 80], ['wan-3.0-prime', 140], ['minimax-h3', 80], ['seedance-1.5-pro', 30],
    ['seedance-v1-pro', 30], ['gemini-omni', 120], ['lipsync', 60],
  ]
  for (const [model, credits] of cells) {
    t.equal(validateVideo(baseBody(model)).credits, credits, `${model} with defaults charges ${credits}`)
    if (model !== 'lipsync') t.equal(priceVideo({ model }), credits, `priceVideo({model: ${model}}) = ${credits}`)
  }
  t.equal(validateImage({ model: 'nano-banana-2.1', prompt: 'p' }).credits, 8, 'nano-banana-2.1 defaults to 1K')
  t.equal(validateImage({ model: 'gpt-image-2.5', prompt: 'p' }).credits, 10, 'gpt-image-2.5 defaults to 1K')
})

t.test('a combination the catalogue has no price for throws 422, never returns a number', async t => {
  t.throws(() => priceVideo({ model: 'seedance-2', resolution: '2k', duration: '6' }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'resolution' } })
  t.throws(() => priceVideo({ model: 'seedance-2', resolution: '480p', duration: '20' }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'duration' } })
  t.throws(() => priceVideo({ model: 'kling-3.0', mode: 'fun' }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'mode' } })
  t.throws(() => priceVideo({ model: 'veo4' }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'model' } })
  t.throws(() => priceImage({ model: 'gpt-image-2', resolution: '8K' }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'resolution' } })
  t.throws(() => priceImage({ model: 'dall-e' }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'model' } })
  t.throws(() => priceAudio({ model: 'podcast' }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'model' } })
  t.throws(() => priceVideo({ model: 'toString' }), { code: 'UNSUPPORTED_OPTION', extra: { param: 'model' } }, 'prototype names are not models')
})
