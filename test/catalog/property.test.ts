// Property-based checks (fast-check): whatever JSON arrives, each validator either returns a
// request with a positive integer price or throws an ApiError whose envelope carries a
// docs/api.md "Errors" code; nothing else escapes.
import t from 'tap'
import fc from 'fast-check'
import { ApiError } from '../../src/errors.js'
import {
  AUDIO_MODEL_IDS, IMAGE_ASPECT_RATIOS, IMAGE_MODEL_IDS, LIP_SYNC_MODES, VIDEO_ASPECT_RATIOS, VIDEO_DURATIONS,
  VIDEO_MODEL_IDS, VIDEO_MODES, VIDEO_RESOLUTIONS,
} from '../../src/catalog/models.js'
import { priceAudio, priceImage, priceVideo } from '../../src/catalog/pricing.js'
import { checkIdempotencyKey } from '../../src/catalog/schemas.js'
import { isPublicIpLiteral } from '../../src/net/ip.js'
import {
  validateAudio, validateBatch, validateExtend, validateImage, validateVideo,
} from '../../src/catalog/validate.js'

/** Codes of docs/api.md "Errors" a validator may answer with. */
const SPEC_CODES = new Set(['VALIDATION_ERROR', 'UNSUPPORTED_OPTION', 'INVALID_IDEMPOTENCY_KEY'])
const RUNS = { numRuns: 400 }

/** True when `e` is an envelope error with a SPEC code and the fields that code promises. */
function isEnvelopeError (e: unknown): boolean {
  if (!(e instanceof ApiError) || !SPEC_CODES.has(e.code)) return false
  const env = JSON.parse(JSON.stringify(e.toJSON())) as Record<string, unknown>
  if (env.error !== true || env.code !== e.code || typeof env.message !== 'string') return false
  if (e.code === 'UNSUPPORTED_OPTION') return e.status === 422 && typeof env.param === 'string' && env.param.length > 0
  if (e.code === 'VALIDATION_ERROR') {
    const d = env.details
    return e.status === 400 && Array.isArray(d) && d.length > 0 &&
      d.every(x => x && typeof x.path === 'string' && typeof x.message === 'string')
  }
  return e.status === 400
}

function isPriced (r: { credits: number; estimated_seconds: number }): boolean {
  return Number.isInteger(r.credits) && r.credits > 0 && Number.isInteger(r.estimated_seconds) && r.estimated_seconds > 0
}

/** Runs a validator; the property holds when it returns a priced request or throws an envelope error. */
function outcome<R extends { credits: number; estimated_seconds: number }> (fn: () => R, check: (r: R) => boolean = () => true): boolean {
  let r: R
  try {
    r = fn()
  } catch (e) {
    if (isEnvelopeError(e)) return true
    throw e
  }
  return isPriced(r) && check(r)
}

const url = fc.oneof(
  { arbitrary: fc.constantFrom('https://cdn.example.com/a.png', 'http://cdn.example.com/b.mp4', 'https://media.example.org/c.mp3'), weight: 12 },
  { arbitrary: fc.webUrl(), weight: 2 },
  { arbitrary: fc.constantFrom('https://127.0.0.1/x', 'http://localhost/a', 'ftp://x.example/y', 'not a url', 'https://[::1]/x'), weight: 1 },
)
/** Mostly values of the enum (so the model rules run), sometimes upper-case, rarely junk. */
const strings = (values: readonly string[]) => fc.oneof(
  { arbitrary: fc.constantFrom(...values), weight: 12 },
  { arbitrary: fc.constantFrom(...values.map(v => v.toUpperCase())), weight: 2 },
  { arbitrary: fc.oneof(fc.string({ maxLength: 6 }), fc.integer()), weight: 1 },
)
const rarely = <T> (arb: fc.Arbitrary<T>) => fc.oneof({ arbitrary: arb, weight: 12 }, {
  arbitrary: fc.oneof(fc.string(), fc.integer(), fc.constant(null)), weight: 1
})
const prompt = fc.oneof(
  { arbitrary: fc.string({ minLength: 1, maxLength: 40 }), weight: 12 },
  { arbitrary: fc.constantFrom('', 'x'.repeat(2600), 'y'.repeat(20001)), weight: 1 },
)

/** Every video field with a plausible value; bodies below take the model and a few of them. */
const videoFields = fc.record({
  model: fc.oneof({ arbitrary: fc.constantFrom(...VIDEO_MODEL_IDS), weight: 20 }, { arbitrary: fc.constantFrom('nano-banana', 'veo4', 'toString', ''), weight: 1 }),
  prompt,
  aspect_ratio: strings(VIDEO_ASPECT_RATIOS),
  duration: strings(VIDEO_DURATIONS),
  mode: strings(VIDEO_MODES),
  resolution: strings(VIDEO_RESOLUTIONS),
  image_url: url,
  first_frame_url: url,
  last_frame_url: url,
  reference_image_urls: fc.array(url, { maxLength: 11 }),
  reference_video_urls: fc.array(url, { maxLength: 6 }),
  reference_audio_urls: fc.array(url, { maxLength: 6 }),
  generate_audio: rarely(fc.boolean()),
  sound: rarely(fc.boolean()),
  multi_shots: fc.boolean(),
  multi_prompt: fc.array(rarely(fc.object()), { maxLength: 6 }),
  kling_elements: fc.array(fc.object(), { maxLength: 4 }),
  audio_url: url,
  audio_duration: rarely(fc.oneof(fc.double({ min: 0.01, max: 125, noNaN: true }), fc.integer({ min: 1, max: 20 }))),
  lip_sync_mode: strings(LIP_SYNC_MODES),
  character_asset_ids: fc.array(rarely(fc.integer({ min: 1, max: 5 })), { maxLength: 4 }),
  voice_asset_ids: fc.array(rarely(fc.integer({ min: 1, max: 5 })), { maxLength: 4 }),
  webhook_url: url,
  webhook_secret: fc.string({ minLength: 14, maxLength: 66 }),
})

/** Picks `model` and up to `max` other fields of a full record, as a sparse JSON body would. */
function sparse<T extends Record<string, unknown>> (full: fc.Arbitrary<T>, keys: readonly string[], max: number): fc.Arbitrary<Record<string, unknown>> {
  return fc.tuple(full, fc.subarray([...keys], { maxLength: max })).map(([b, picked]) => {
    const out: Record<string, unknown> = { model: b.model }
    for (const k of picked) out[k] = b[k]
    return out
  })
}

/** Plausible video bodies: the model and up to 3 options, mostly valid values, some junk. */
const videoBody = sparse(videoFields, [
  'prompt', 'prompt', 'aspect_ratio', 'duration', 'mode', 'resolution', 'image_url', 'first_frame_url', 'last_frame_url',
  'reference_image_urls', 'reference_video_urls', 'reference_audio_urls', 'generate_audio', 'sound', 'multi_shots',
  'multi_prompt', 'kling_elements', 'audio_url', 'audio_duration', 'lip_sync_mode', 'character_asset_ids',
  'voice_asset_ids', 'webhook_url', 'webhook_secret',
], 3)

const imageBody = fc.record({
  model: fc.oneof({ arbitrary: fc.constantFrom(...IMAGE_MODEL_IDS), weight: 20 }, { arbitrary: fc.constantFrom('veo3-fast', 'dall-e'), weight: 1 }),
  prompt,
  aspect_ratio: strings(IMAGE_ASPECT_RATIOS),
  resolution: strings(['1K', '2K', '4K', '1k', '8K']),
  output_format: strings(['png', 'jpeg', 'gif']),
  image_urls: fc.array(url, { maxLength: 6 }),
  webhook_url: url,
  webhook_secret: fc.string({ minLength: 14, maxLength: 66 }),
}, { requiredKeys: ['model'] })

const audioFields = fc.record({
  model: fc.oneof({ arbitrary: fc.constantFrom(...AUDIO_MODEL_IDS), weight: 20 }, { arbitrary: fc.constant('podcast'), weight: 1 }),
  text: fc.oneof(fc.string({ minLength: 1, maxLength: 50 }), fc.integer({ min: 0, max: 5100 }).map(n => 'a'.repeat(n))),
  voice_id: rarely(fc.string({ minLength: 1, maxLength: 70 })),
  voice_name: fc.string({ maxLength: 110 }),
  title: fc.string({ minLength: 1, maxLength: 90 }),
  style: fc.string({ minLength: 1, maxLength: 20 }),
  instrumental: rarely(fc.boolean()),
  lyrics: fc.string({ maxLength: 20 }),
  webhook_url: url,
})
/** Plausible audio bodies: voiceover-shaped, music-shaped, or a mix of both. */
const audioBody = fc.oneof(
  sparse(audioFields.map(b => ({ ...b, model: 'voiceover' })), ['text', 'text', 'text', 'voice_id', 'voice_id', 'voice_name', 'webhook_url', 'lyrics'], 5),
  sparse(audioFields.map(b => ({ ...b, model: 'music' })), ['lyrics', 'lyrics', 'instrumental', 'instrumental', 'title', 'style', 'webhook_url', 'text'], 5),
  sparse(audioFields, ['text', 'voice_id', 'voice_name', 'title', 'style', 'instrumental', 'lyrics', 'webhook_url'], 8),
)

const extendBody = fc.record({
  job_id: rarely(fc.string({ maxLength: 20 })),
  prompt: rarely(fc.string({ maxLength: 20 })),
  webhook_url: url,
  webhook_secret: fc.string({ minLength: 14, maxLength: 66 }),
}, { requiredKeys: [] })

/** Counts outcomes over a sample, to show the generator reaches every layer. */
function spread (bodies: unknown[], fn: (b: unknown) => unknown): Record<'ok' | 'VALIDATION_ERROR' | 'UNSUPPORTED_OPTION', number> {
  const n = { ok: 0, VALIDATION_ERROR: 0, UNSUPPORTED_OPTION: 0 }
  for (const b of bodies) {
    try { fn(b); n.ok++ } catch (e) { if (e instanceof ApiError && (e.code === 'VALIDATION_ERROR' || e.code === 'UNSUPPORTED_OPTION')) n[e.code]++ }
  }
  return n
}

/** Any JSON at all, plus objects that carry a real model id so the schema gets past `model`. */
const anyJson = fc.oneof(
  fc.jsonValue(),
  fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 2 })),
)
const withModel = (ids: readonly string[]) => fc.tuple(fc.constantFrom(...ids), fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 2 })))
  .map(([model, rest]) => ({ ...rest, model }))

t.test('random JSON bodies never throw anything but an envelope error', async t => {
  t.doesNotThrow(() => fc.assert(fc.property(anyJson, b => outcome(() => validateVideo(b))), RUNS), 'video')
  t.doesNotThrow(() => fc.assert(fc.property(anyJson, b => outcome(() => validateImage(b))), RUNS), 'image')
  t.doesNotThrow(() => fc.assert(fc.property(anyJson, b => outcome(() => validateAudio(b))), RUNS), 'audio')
  t.doesNotThrow(() => fc.assert(fc.property(anyJson, b => outcome(() => validateExtend(b))), RUNS), 'extend')
  t.doesNotThrow(() => fc.assert(fc.property(withModel(VIDEO_MODEL_IDS), b => outcome(() => validateVideo(b))), RUNS), 'video with a real model id')
  t.doesNotThrow(() => fc.assert(fc.property(withModel(IMAGE_MODEL_IDS), b => outcome(() => validateImage(b))), RUNS), 'image with a real model id')
  t.doesNotThrow(() => fc.assert(fc.property(withModel(AUDIO_MODEL_IDS), b => outcome(() => validateAudio(b))), RUNS), 'audio with a real model id')
})

t.test('the plausible generators reach success, the schema layer and the model rules', async t => {
  for (const [name, arb, fn] of [
    ['video', videoBody, validateVideo], ['image', imageBody, validateImage], ['audio', audioBody, validateAudio],
  ] as const) {
    const n = spread(fc.sample(arb as fc.Arbitrary<unknown>, { numRuns: 3000, seed: 42 }), fn)
    t.ok(n.ok >= 100 && n.VALIDATION_ERROR >= 100 && n.UNSUPPORTED_OPTION >= 100, `${name}: ${JSON.stringify(n)}`)
  }
})

t.test('plausible video bodies: a priced request whose price the pricing table confirms, or an envelope error', async t => {
  t.doesNotThrow(() => fc.assert(fc.property(videoBody, b => outcome(() => validateVideo(b), r =>
    r.credits === priceVideo(r) && r.model === b.model && (r.resolution === null || r.resolution === r.resolution.toLowerCase()))), { numRuns: 2000 }))
})

t.test('plausible image bodies: priced or an envelope error', async t => {
  t.doesNotThrow(() => fc.assert(fc.property(imageBody, b => outcome(() => validateImage(b), r =>
    r.credits === priceImage(r) && (r.mode === 'edit') === (Array.isArray(b.image_urls) && b.image_urls.length > 0))), { numRuns: 1500 }))
})

t.test('plausible audio bodies: priced or an envelope error', async t => {
  t.doesNotThrow(() => fc.assert(fc.property(audioBody, b => outcome(() => validateAudio(b), r => r.credits === priceAudio(r))), { numRuns: 1500 }))
})

t.test('plausible extend bodies: 120 credits or an envelope error', async t => {
  t.doesNotThrow(() => fc.assert(fc.property(extendBody, b => outcome(() => validateExtend(b), r => r.credits === 120)), RUNS))
})

t.test('random batches: an envelope error, or one result per item, each priced or an envelope error', async t => {
  const item = fc.oneof(
    videoBody.map(b => ({ ...b, type: 'video' })),
    imageBody.map(b => ({ ...b, type: 'image' })),
    fc.jsonValue({ maxDepth: 2 }),
  )
  const body = fc.oneof(fc.record({ jobs: fc.array(item, { maxLength: 12 }) }), anyJson)
  t.doesNotThrow(() => fc.assert(fc.property(body, b => {
    let results
    try {
      results = validateBatch(b)
    } catch (e) {
      if (isEnvelopeError(e)) return true
      throw e
    }
    const jobs = (b as { jobs: unknown[] }).jobs
    return results.length === jobs.length && results.every((r, i) => r.index === i && (r.ok ? isPriced(r.request) : isEnvelopeError(r.error)))
  }), { numRuns: 500 }))
})

t.test('Idempotency-Key: any string is either returned as is or refused with INVALID_IDEMPOTENCY_KEY', async t => {
  const key = fc.oneof(fc.string({ maxLength: 210 }), fc.stringMatching(/^[A-Za-z0-9_.-]{1,200}$/))
  t.doesNotThrow(() => fc.assert(fc.property(key, k => {
    const valid = /^[A-Za-z0-9_.-]{1,200}$/.test(k)
    try {
      return checkIdempotencyKey(k) === k && valid
    } catch (e) {
      return !valid && isEnvelopeError(e) && (e as ApiError).code === 'INVALID_IDEMPOTENCY_KEY'
    }
  }), { numRuns: 1000 }))
})

t.test('an IPv4 address and its IPv4-mapped IPv6 form are judged alike', async t => {
  t.doesNotThrow(() => fc.assert(fc.property(fc.ipV4(), ip => isPublicIpLiteral(ip) === isPublicIpLiteral(`::ffff:${ip}`)), { numRuns: 2000 }))
})
