// Validation of every generation endpoint (docs/api.md "Jobs"): for each rule, the right
// request passes and the wrong one gets the right code and `param`.
import t, { type Test } from 'tap'
import { ApiError } from '../../src/errors.js'
import { checkIdempotencyKey, IDEMPOTENCY_KEY_PATTERN } from '../../src/catalog/schemas.js'
import {
  validateAudio, validateBatch, validateExtend, validateImage, validateVideo,
  type ValidateOptions, type ValidationIssue,
} from '../../src/catalog/validate.js'
import { VIDEO_MODEL_IDS, IMAGE_MODEL_IDS } from '../../src/catalog/models.js'

const IMG = 'https://cdn.example.com/a.png'
const IMG2 = 'https://cdn.example.com/b.png'
const AUD = 'https://cdn.example.com/a.mp3'
const VID = 'https://cdn.example.com/a.mp4'
const HOOK = 'https://hooks.example.com/genjobs'
const urls = (n: number, u = IMG) => Array.from({ length: n }, (_, i) => `${u}?${i}`)

/** Asserts a 422 UNSUPPORTED_OPTION naming `param`. */
function unsupported (t: Test, fn: () => unknown, param: string, name?: string) {
  t.throws(fn, { code: 'UNSUPPORTED_OPTION', status: 422, extra: { param } }, name ?? `422 UNSUPPORTED_OPTION param ${param}`)
}

/** Asserts a 400 VALIDATION_ERROR whose details name `paths` (a missing conditionally required field). */
function required (t: Test, fn: () => unknown, paths: string[], name?: string) {
  t.throws(fn, { code: 'VALIDATION_ERROR', status: 400 }, name ?? `400 VALIDATION_ERROR naming ${paths.join(', ')}`)
  try { fn() } catch (e) { t.same(((e as ApiError).extra?.details as ValidationIssue[]).map(d => d.path), paths, `details name ${paths.join(', ')}`) }
}

/** Asserts a 400 VALIDATION_ERROR and returns its details. */
function invalid (t: Test, fn: () => unknown, name?: string): ValidationIssue[] {
  try {
    fn()
  } catch (e) {
    t.ok(e instanceof ApiError && e.code === 'VALIDATION_ERROR' && e.status === 400, name ?? '400 VALIDATION_ERROR')
    const details = (e as ApiError).extra?.details as ValidationIssue[]
    t.ok(Array.isArray(details) && details.length > 0, 'details lists the problems')
    return details
  }
  t.fail(`${name ?? 'request'} was accepted`)
  return []
}

function hasIssue (t: Test, details: ValidationIssue[], path: string, message?: RegExp) {
  const hit = details.find(d => d.path === path && (!message || message.test(d.message)))
  t.ok(hit, `details name ${path}${message ? ` (${message})` : ''}: ${JSON.stringify(details)}`)
}

// ---- Schema layer: 400 VALIDATION_ERROR ----------------------------------------------------

t.test('a body that is not an object answers 400 VALIDATION_ERROR at the root', async t => {
  for (const body of [null, undefined, 'x', 3, [], true]) hasIssue(t, invalid(t, () => validateVideo(body)), '')
  hasIssue(t, invalid(t, () => validateImage([])), '')
  hasIssue(t, invalid(t, () => validateAudio('music')), '')
  hasIssue(t, invalid(t, () => validateExtend(null)), '')
})

t.test('a request without model answers 400 with details path /model', async t => {
  hasIssue(t, invalid(t, () => validateVideo({ prompt: 'p' })), '/model', /required/)
  hasIssue(t, invalid(t, () => validateImage({ prompt: 'p' })), '/model', /required/)
  hasIssue(t, invalid(t, () => validateAudio({ text: 'p' })), '/model', /required/)
  hasIssue(t, invalid(t, () => validateVideo({ model: 7 })), '/model', /string/)
})

t.test('every schema problem is listed, each with its path and message', async t => {
  const d = invalid(t, () => validateVideo({ model: 'seedance-2', prompt: 5, duration: 6, aspect_ratio: '5:4', extra: true, image_url: 'not a uri' }))
  hasIssue(t, d, '/prompt', /string/)
  hasIssue(t, d, '/duration', /string/)
  hasIssue(t, d, '/aspect_ratio', /one of/)
  hasIssue(t, d, '/extra', /not a known field/)
  hasIssue(t, d, '/image_url', /URI/)
  t.equal(d.filter(x => x.path === '/duration').length, 1, 'a wrong type is reported once, not also as an enum miss')
  for (const x of d) t.match(x, { path: String, message: String })
})

t.test('unknown fields are rejected with 400, not ignored', async t => {
  hasIssue(t, invalid(t, () => validateVideo({ model: 'veo3-fast', prompt: 'p', durations: '8' })), '/durations', /not a known field/)
  hasIssue(t, invalid(t, () => validateImage({ model: 'nano-banana', prompt: 'p', n: 2 })), '/n')
  hasIssue(t, invalid(t, () => validateAudio({ model: 'music', instrumental: true, genre: 'x' })), '/genre')
  hasIssue(t, invalid(t, () => validateExtend({ job_id: 'job_1', prompt: 'p', model: 'veo3-fast' })), '/model')
  hasIssue(t, invalid(t, () => validateVideo(JSON.parse('{"model":"veo3-fast","prompt":"p","__proto__":{"x":1}}'))), '/__proto__')
})

t.test('prompt is 1..20000 characters for video', async t => {
  hasIssue(t, invalid(t, () => validateVideo({ model: 'seedance-2', prompt: '' })), '/prompt')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'seedance-2', prompt: 'a'.repeat(20001) })), '/prompt')
  t.equal(validateVideo({ model: 'seedance-2', prompt: 'a'.repeat(20000) }).prompt?.length, 20000)
})

t.test('enumerated video fields refuse values outside SPEC.md 4.3', async t => {
  hasIssue(t, invalid(t, () => validateVideo({ model: 'grok-video', prompt: 'p', duration: '7' })), '/duration', /one of/)
  hasIssue(t, invalid(t, () => validateVideo({ model: 'grok-video', prompt: 'p', resolution: '360p' })), '/resolution')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'grok-video', prompt: 'p', mode: 'turbo' })), '/mode')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'lipsync', image_url: IMG, audio_url: AUD, audio_duration: 3, lip_sync_mode: 'loop' })), '/lip_sync_mode')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', generate_audio: 'yes' })), '/generate_audio')
})

t.test('URIs must be well-formed and at most 2048 characters', async t => {
  const long = 'https://cdn.example.com/' + 'a'.repeat(2048 - 24)
  t.equal(long.length, 2048)
  t.equal(validateVideo({ model: 'grok-video', prompt: 'p', image_url: long }).image_url, long)
  hasIssue(t, invalid(t, () => validateVideo({ model: 'grok-video', prompt: 'p', image_url: long + 'a' })), '/image_url')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'grok-video', prompt: 'p', image_url: '/relative/path.png' })), '/image_url', /URI/)
  hasIssue(t, invalid(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', reference_image_urls: [IMG, 'nope'] })), '/reference_image_urls/1')
  hasIssue(t, invalid(t, () => validateImage({ model: 'nano-banana', prompt: 'p', image_urls: ['x y'] })), '/image_urls/0')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', webhook_url: 'hooks' })), '/webhook_url')
})

t.test('array maxima of the schema: references 10/5/5, multi_prompt 5, kling_elements 3, asset ids 3', async t => {
  hasIssue(t, invalid(t, () => validateVideo({ model: 'wan-3.0', prompt: 'p', reference_image_urls: urls(11) })), '/reference_image_urls')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'wan-3.0', prompt: 'p', reference_video_urls: urls(6, VID) })), '/reference_video_urls')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'wan-3.0', prompt: 'p', reference_audio_urls: urls(6, AUD) })), '/reference_audio_urls')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'kling-3.0', prompt: 'p', multi_prompt: Array(6).fill({}) })), '/multi_prompt')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'kling-3.0', prompt: 'p', kling_elements: Array(4).fill({}) })), '/kling_elements')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'gemini-omni', prompt: 'p', voice_asset_ids: [1, 2, 3, 4], character_asset_ids: [1] })), '/voice_asset_ids')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'gemini-omni', prompt: 'p', voice_asset_ids: [1], character_asset_ids: [0] })), '/character_asset_ids/0')
  hasIssue(t, invalid(t, () => validateVideo({ model: 'gemini-omni', prompt: 'p', voice_asset_ids: [1.5], character_asset_ids: [1] })), '/voice_asset_ids/0')
  hasIssue(t, invalid(t, () => validateImage({ model: 'nano-banana', prompt: 'p', image_urls: urls(6) })), '/image_urls')
})

t.test('webhook_secret is 16..64 characters', async t => {
  hasIssue(t, invalid(t, () => validateVideo({ model: 'veo3-fast', prompt: 'p', webhook_url: HOOK, webhook_secret: 's'.repeat(15) })), '/webhook_secret')
  hasIssue(t, invalid(t, () => validateImage({ model: 'nano-banana', prompt: 'p', webhook_url: HOOK, webhook_secret: 's'.repeat(65) })), '/webhook_secret')
  t.equal(validateVideo({ model: 'veo3-fast', prompt: 'p', webhook_url: HOOK, webhook_secret: 's'.repeat(16) }).webhook_secret, 's'.repeat(16))
  t.equal(validateAudio({ model: 'music', instrumental: true, webhook_url: HOOK, webhook_secret: 's'.repeat(64) }).webhook_secret, 's'.repeat(64))
})

t.test('audio_duration is a number above 0 and at most 120', async t => {
  const body = { model: 'lipsync', image_url: IMG, audio_url: AUD, lip_sync_mode: 'collate' }
  hasIssue(t, invalid(t, () => validateVideo({ ...body, audio_duration: 0 })), '/audio_duration')
  hasIssue(t, invalid(t, () => validateVideo({ ...body, audio_duration: 120.5 })), '/audio_duration')
  hasIssue(t, invalid(t, () => validateVideo({ ...body, audio_duration: '10' })), '/audio_duration')
  t.equal(validateVideo({ ...body, audio_duration: 0.2 }).audio_duration, 0.2)
})

t.test('image schema: prompt 1..10000, aspect ratios, output formats, resolutions', async t => {
  hasIssue(t, invalid(t, () => validateImage({ model: 'nano-banana', prompt: 'a'.repeat(10001) })), '/prompt')
  hasIssue(t, invalid(t, () => validateImage({ model: 'nano-banana', prompt: 'p', aspect_ratio: '4:3' })), '/aspect_ratio')
  hasIssue(t, invalid(t, () => validateImage({ model: 'nano-banana', prompt: 'p', output_format: 'gif' })), '/output_format')
  hasIssue(t, invalid(t, () => validateImage({ model: 'gpt-image-2', prompt: 'p', resolution: '8K' })), '/resolution')
  t.equal(validateImage({ model: 'nano-banana', prompt: 'a'.repeat(10000), aspect_ratio: 'auto', output_format: 'jpeg' }).output_format, 'jpeg')
})

t.test('audio schema: field lengths of SPEC.md 4.5', async t => {
  hasIssue(t, invalid(t, () => validateAudio({ model: 'voiceover', text: 'a'.repeat(5001), voice_id: 'v' })), '/text')
  hasIssue(t, invalid(t, () => validateAudio({ model: 'voiceover', text: '', voice_id: 'v' })), '/text')
  hasIssue(t, invalid(t, () => validateAudio({ model: 'voiceover', text: 'hi', voice_id: 'v'.repeat(65) })), '/voice_id')
  hasIssue(t, invalid(t, () => validateAudio({ model: 'voiceover', text: 'hi', voice_id: 'v', voice_name: 'n'.repeat(101) })), '/voice_name')
  hasIssue(t, invalid(t, () => validateAudio({ model: 'music', instrumental: true, title: 't'.repeat(81) })), '/title')
  hasIssue(t, invalid(t, () => validateAudio({ model: 'music', instrumental: true, style: 's'.repeat(1001) })), '/style')
  hasIssue(t, invalid(t, () => validateAudio({ model: 'music', lyrics: 'l'.repeat(3001) })), '/lyrics')
  t.equal(validateAudio({ model: 'voiceover', text: 'hi', voice_id: 'v'.repeat(64), voice_name: 'n'.repeat(100) }).voice_id, 'v'.repeat(64))
})

t.test('extend needs job_id and a 1..5000 prompt', async t => {
  hasIssue(t, invalid(t, () => validateExtend({ prompt: 'p' })), '/job_id', /required/)
  hasIssue(t, invalid(t, () => validateExtend({ job_id: '', prompt: 'p' })), '/job_id')
  hasIssue(t, invalid(t, () => validateExtend({ job_id: 'job_1' })), '/prompt', /required/)
  hasIssue(t, invalid(t, () => validateExtend({ job_id: 'job_1', prompt: 'a'.repeat(5001) })), '/prompt')
  t.same(validateExtend({ job_id: 'job_1', prompt: 'more', webhook_url: HOOK }), {
    kind: 'extend', job_id: 'job_1', prompt: 'more', webhook_url: HOOK, webhook_secret: null, credits: 120, estimated_seconds: 110,
  })
})

t.test('Idempotency-Key: 1-200 characters of A-Z a-z 0-9 _ . -, else 400 INVALID_IDEMPOTENCY_KEY', async t => {
  t.equal(IDEMPOTENCY_KEY_PATTERN, '^[A-Za-z0-9_.-]{1,200}$')
  t.equal(checkIdempotencyKey(undefined), undefined, 'absent header is fine')
  for (const ok of ['a', 'order-123_retry.2', 'A'.repeat(200), '0.-_']) t.equal(checkIdempotencyKey(ok), ok, `${ok.slice(0, 20)} accepted`)
  for (const bad of ['', 'A'.repeat(201), 'has space', 'slash/key', 'ключ', 'a:b', 'tab\t']) {
    t.throws(() => checkIdempotencyKey(bad), { code: 'INVALID_IDEMPOTENCY_KEY', status: 400 }, `${JSON.stringify(bad.slice(0, 20))} refused`)
  }
})

// ---- Model rules: 422 UNSUPPORTED_OPTION -----------------------------------------------------

t.test('an unknown model id answers 422 UNSUPPORTED_OPTION param model', async t => {
  unsupported(t, () => validateVideo({ model: 'veo4', prompt: 'p' }), 'model')
  unsupported(t, () => validateVideo({ model: 'nano-banana', prompt: 'p' }), 'model', 'an image model on the video endpoint')
  unsupported(t, () => validateVideo({ model: 'constructor', prompt: 'p' }), 'model', 'prototype names are not models')
  unsupported(t, () => validateImage({ model: 'veo3-fast', prompt: 'p' }), 'model')
  unsupported(t, () => validateImage({ model: 'midjourney', prompt: 'p' }), 'model')
  unsupported(t, () => validateAudio({ model: 'podcast', text: 'p' }), 'model')
  t.throws(() => validateVideo({ model: 'nano-banana' }), { message: /image model/ }, 'the message points at the right endpoint')
})

t.test('all 15 video model ids are accepted, including wan-3.0, wan-3.0-prime and minimax-h3', async t => {
  t.equal(VIDEO_MODEL_IDS.length, 15)
  for (const model of VIDEO_MODEL_IDS) {
    const body: Record<string, unknown> = model === 'gemini-omni'
      ? { model, prompt: 'p', voice_asset_ids: [1], character_asset_ids: [1] }
      : model === 'lipsync' ? { model, image_url: IMG, audio_url: AUD, audio_duration: 4 } : { model, prompt: 'p' }
    const r = validateVideo(body)
    t.equal(r.model, model)
    t.ok(Number.isInteger(r.credits) && r.credits > 0, `${model} is priced`)
  }
})

t.test('all 6 image model ids are accepted, including nano-banana-2.1 and gpt-image-2.5', async t => {
  t.equal(IMAGE_MODEL_IDS.length, 6)
  for (const model of IMAGE_MODEL_IDS) t.equal(validateImage({ model, prompt: 'p' }).model, model)
})

t.test('an aspect ratio the model does not list answers 422 param aspect_ratio', async t => {
  unsupported(t, () => validateVideo({ model: 'grok-video', prompt: 'p', aspect_ratio: '4:3' }), 'aspect_ratio')
  unsupported(t, () => validateVideo({ model: 'veo3-fast', prompt: 'p', aspect_ratio: '1:1' }), 'aspect_ratio')
  unsupported(t, () => validateVideo({ model: 'seedance-2-mini', prompt: 'p', aspect_ratio: '2:3' }), 'aspect_ratio')
  unsupported(t, () => validateVideo({ model: 'wan-3.0', prompt: 'p', aspect_ratio: '21:9' }), 'aspect_ratio')
  unsupported(t, () => validateVideo({ model: 'kling-3.0', prompt: 'p', aspect_ratio: 'adaptive' }), 'aspect_ratio')
  unsupported(t, () => validateVideo({ model: 'lipsync', image_url: IMG, audio_url: AUD, audio_duration: 3, aspect_ratio: '16:9' }), 'aspect_ratio')
  t.equal(validateVideo({ model: 'grok-video', prompt: 'p', aspect_ratio: '3:2' }).aspect_ratio, '3:2')
  t.equal(validateVideo({ model: 'seedance-2-mini', prompt: 'p', aspect_ratio: '21:9' }).aspect_ratio, '21:9')
  t.equal(validateVideo({ model: 'seedance-2-mini', prompt: 'p', aspect_ratio: 'adaptive' }).aspect_ratio, 'adaptive')
  t.equal(validateVideo({ model: 'minimax-h3', prompt: 'p', aspect_ratio: '21:9' }).aspect_ratio, '21:9')
})

t.test('a duration the model does not list answers 422 param duration', async t => {
  unsupported(t, () => validateVideo({ model: 'grok-video', prompt: 'p', duration: '8' }), 'duration')
  unsupported(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', duration: '20' }), 'duration')
  unsupported(t, () => validateVideo({ model: 'seedance-1.5-pro', prompt: 'p', duration: '6' }), 'duration')
  unsupported(t, () => validateVideo({ model: 'seedance-v1-pro', prompt: 'p', duration: '6' }), 'duration')
  unsupported(t, () => validateVideo({ model: 'gemini-omni', prompt: 'p', duration: '15', voice_asset_ids: [1], character_asset_ids: [1] }), 'duration')
  unsupported(t, () => validateVideo({ model: 'lipsync', image_url: IMG, audio_url: AUD, audio_duration: 3, duration: '6' }), 'duration')
  t.equal(validateVideo({ model: 'seedance-1.5-pro', prompt: 'p', duration: '12' }).duration, '12')
})

t.test('veo3-fast with a duration answers 422 UNSUPPORTED_OPTION param duration', async t => {
  unsupported(t, () => validateVideo({ model: 'veo3-fast', prompt: 'p', duration: '8' }), 'duration')
  unsupported(t, () => validateVideo({ model: 'veo3-quality', prompt: 'p', duration: '8' }), 'duration')
  t.equal(validateVideo({ model: 'veo3-fast', prompt: 'p' }).duration, null)
})

t.test('veo3 with a resolution answers 422 UNSUPPORTED_OPTION param resolution', async t => {
  unsupported(t, () => validateVideo({ model: 'veo3-fast', prompt: 'p', resolution: '720p' }), 'resolution')
  unsupported(t, () => validateVideo({ model: 'veo3-quality', prompt: 'p', resolution: '1080P' }), 'resolution')
  t.equal(validateVideo({ model: 'veo3-quality', prompt: 'p' }).resolution, null)
})

t.test('a resolution the model does not list answers 422 param resolution', async t => {
  unsupported(t, () => validateVideo({ model: 'grok-video', prompt: 'p', resolution: '1080p' }), 'resolution')
  unsupported(t, () => validateVideo({ model: 'kling-3.0', prompt: 'p', resolution: '720p' }), 'resolution')
  unsupported(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', resolution: '2k' }), 'resolution')
  unsupported(t, () => validateVideo({ model: 'minimax-h3', prompt: 'p', resolution: '720p' }), 'resolution')
  unsupported(t, () => validateVideo({ model: 'gemini-omni', prompt: 'p', resolution: '720p', voice_asset_ids: [1], character_asset_ids: [1] }), 'resolution')
  unsupported(t, () => validateVideo({ model: 'wan-3.0', prompt: 'p', resolution: '4K' }), 'resolution')
  t.equal(validateVideo({ model: 'minimax-h3', prompt: 'p', resolution: '768p' }).resolution, '768p')
})

t.test('upper-case resolutions are accepted and normalised to lower case', async t => {
  t.equal(validateVideo({ model: 'seedance-2', prompt: 'p', resolution: '480P' }).resolution, '480p')
  t.equal(validateVideo({ model: 'seedance-2', prompt: 'p', resolution: '720P' }).resolution, '720p')
  t.equal(validateVideo({ model: 'seedance-2', prompt: 'p', resolution: '1080P' }).resolution, '1080p')
  t.equal(validateVideo({ model: 'seedance-2', prompt: 'p', resolution: '4K' }).resolution, '4k')
  t.equal(validateVideo({ model: 'minimax-h3', prompt: 'p', resolution: '2K' }).resolution, '2k')
  t.equal(validateVideo({ model: 'minimax-h3', prompt: 'p', resolution: '768P' }).resolution, '768p')
})

t.test('a mode the model does not take answers 422 param mode', async t => {
  unsupported(t, () => validateVideo({ model: 'grok-video', prompt: 'p', mode: 'pro' }), 'mode')
  unsupported(t, () => validateVideo({ model: 'kling-3.0', prompt: 'p', mode: 'spicy' }), 'mode')
  unsupported(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', mode: 'std' }), 'mode')
  unsupported(t, () => validateVideo({ model: 'veo3-fast', prompt: 'p', mode: 'normal' }), 'mode')
  t.equal(validateVideo({ model: 'grok-video', prompt: 'p', mode: 'spicy' }).mode, 'spicy')
  t.equal(validateVideo({ model: 'kling-3.0', prompt: 'p', mode: 'pro' }).mode, 'pro')
  t.equal(validateVideo({ model: 'grok-video', prompt: 'p' }).mode, 'normal', 'grok-video defaults to normal')
  t.equal(validateVideo({ model: 'kling-3.0', prompt: 'p' }).mode, 'std', 'kling-3.0 defaults to std')
})

t.test('last_frame_url without first_frame_url answers 400 naming first_frame_url', async t => {
  required(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', last_frame_url: IMG }), ['/first_frame_url'])
  required(t, () => validateVideo({ model: 'veo3-fast', prompt: 'p', last_frame_url: IMG }), ['/first_frame_url'])
  const r = validateVideo({ model: 'seedance-2', prompt: 'p', first_frame_url: IMG, last_frame_url: IMG2 })
  t.same([r.image_url, r.last_frame_url], [IMG, IMG2])
  t.equal(validateVideo({ model: 'veo3-fast', prompt: 'p', image_url: IMG, last_frame_url: IMG2 }).last_frame_url, IMG2, 'image_url counts as the first frame')
})

t.test('last_frame_url on a model without end frames answers 422 param last_frame_url', async t => {
  for (const model of ['grok-video', 'kling-3.0', 'seedance-1.5-pro', 'seedance-v1-pro']) {
    unsupported(t, () => validateVideo({ model, prompt: 'p', first_frame_url: IMG, last_frame_url: IMG2 }), 'last_frame_url', `${model} refuses last_frame_url`)
    t.equal(validateVideo({ model, prompt: 'p', first_frame_url: IMG }).image_url, IMG, `${model} takes a first frame`)
  }
})

t.test('first_frame_url is an alias of image_url and wins when both are sent', async t => {
  t.equal(validateVideo({ model: 'grok-video', prompt: 'p', image_url: IMG }).image_url, IMG)
  t.equal(validateVideo({ model: 'grok-video', prompt: 'p', first_frame_url: IMG2 }).image_url, IMG2)
  t.equal(validateVideo({ model: 'grok-video', prompt: 'p', image_url: IMG, first_frame_url: IMG2 }).image_url, IMG2)
})

t.test('frames together with reference inputs answer 422 naming the reference field', async t => {
  unsupported(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', image_url: IMG, reference_image_urls: [IMG2] }), 'reference_image_urls')
  unsupported(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', first_frame_url: IMG, reference_video_urls: [VID] }), 'reference_video_urls')
  unsupported(t, () => validateVideo({ model: 'wan-3.0', prompt: 'p', first_frame_url: IMG, last_frame_url: IMG2, reference_audio_urls: [AUD] }), 'reference_audio_urls')
  unsupported(t, () => validateVideo({ model: 'minimax-h3', prompt: 'p', image_url: IMG, reference_image_urls: [IMG2] }), 'reference_image_urls')
  t.same(validateVideo({ model: 'seedance-2', prompt: 'p', reference_image_urls: [IMG], reference_video_urls: [VID], reference_audio_urls: [AUD] }).reference_audio_urls, [AUD])
  t.equal(validateVideo({ model: 'seedance-2', prompt: 'p', image_url: IMG, reference_image_urls: [] }).image_url, IMG, 'an empty list is no reference')
})

t.test('reference counts are per model', async t => {
  // [model, images max, videos max, audio max]
  const caps: Array<[string, number, number, number]> = [
    ['seedance-2-fast', 9, 3, 1], ['seedance-2', 9, 3, 1], ['seedance-2-mini', 9, 3, 1], ['seedance-2.5', 9, 3, 1],
    ['wan-3.0', 10, 5, 5], ['wan-3.0-prime', 10, 5, 5], ['minimax-h3', 5, 3, 3],
  ]
  for (const [model, images, videos, audio] of caps) {
    t.equal(validateVideo({ model, prompt: 'p', reference_image_urls: urls(images) }).reference_image_urls.length, images, `${model} takes ${images} reference images`)
    t.equal(validateVideo({ model, prompt: 'p', reference_video_urls: urls(videos, VID) }).reference_video_urls.length, videos, `${model} takes ${videos} reference videos`)
    t.equal(validateVideo({ model, prompt: 'p', reference_audio_urls: urls(audio, AUD) }).reference_audio_urls.length, audio, `${model} takes ${audio} reference audio`)
    if (images < 10) unsupported(t, () => validateVideo({ model, prompt: 'p', reference_image_urls: urls(images + 1) }), 'reference_image_urls', `${model} refuses ${images + 1} reference images`)
    if (videos < 5) unsupported(t, () => validateVideo({ model, prompt: 'p', reference_video_urls: urls(videos + 1, VID) }), 'reference_video_urls', `${model} refuses ${videos + 1} reference videos`)
    if (audio < 5) unsupported(t, () => validateVideo({ model, prompt: 'p', reference_audio_urls: urls(audio + 1, AUD) }), 'reference_audio_urls', `${model} refuses ${audio + 1} reference audio`)
  }
  const omni = { model: 'gemini-omni', prompt: 'p', voice_asset_ids: [1] }
  t.equal(validateVideo({ ...omni, reference_image_urls: urls(7) }).reference_image_urls.length, 7)
  unsupported(t, () => validateVideo({ ...omni, reference_image_urls: urls(8) }), 'reference_image_urls')
  t.equal(validateVideo({ ...omni, character_asset_ids: [1], reference_video_urls: [VID] }).reference_video_urls.length, 1)
  unsupported(t, () => validateVideo({ ...omni, character_asset_ids: [1], reference_video_urls: urls(2, VID) }), 'reference_video_urls')
  unsupported(t, () => validateVideo({ ...omni, character_asset_ids: [1], reference_audio_urls: [AUD] }), 'reference_audio_urls')
  for (const model of ['veo3-fast', 'grok-video', 'kling-3.0', 'seedance-1.5-pro', 'seedance-v1-pro']) {
    unsupported(t, () => validateVideo({ model, prompt: 'p', reference_image_urls: [IMG] }), 'reference_image_urls', `${model} takes no reference images`)
    unsupported(t, () => validateVideo({ model, prompt: 'p', reference_video_urls: [VID] }), 'reference_video_urls', `${model} takes no reference videos`)
  }
})

t.test('prompts longer than the model cap answer 422 param prompt', async t => {
  const caps: Array<[string, number]> = [['veo3-fast', 10000], ['veo3-quality', 10000], ['grok-video', 5000], ['kling-3.0', 2500], ['minimax-h3', 7000]]
  for (const [model, cap] of caps) {
    t.equal(validateVideo({ model, prompt: 'a'.repeat(cap) }).prompt?.length, cap, `${model} takes ${cap} characters`)
    unsupported(t, () => validateVideo({ model, prompt: 'a'.repeat(cap + 1) }), 'prompt', `${model} refuses ${cap + 1} characters`)
  }
  const lip = { model: 'lipsync', image_url: IMG, audio_url: AUD, audio_duration: 3 }
  t.equal(validateVideo({ ...lip, prompt: 'a'.repeat(5000) }).credits, 60)
  unsupported(t, () => validateVideo({ ...lip, prompt: 'a'.repeat(5001) }), 'prompt')
  unsupported(t, () => validateVideo({ model: 'kling-3.0', prompt: '\u{1F600}'.repeat(2501) }), 'prompt', 'caps count characters, not UTF-16 units')
  t.ok(validateVideo({ model: 'kling-3.0', prompt: '\u{1F600}'.repeat(2500) }))
})

t.test('gemini-omni needs voice_asset_ids and a character', async t => {
  required(t, () => validateVideo({ model: 'gemini-omni', prompt: 'p', character_asset_ids: [1] }), ['/voice_asset_ids'])
  required(t, () => validateVideo({ model: 'gemini-omni', prompt: 'p', character_asset_ids: [1], voice_asset_ids: [] }), ['/voice_asset_ids'])
  required(t, () => validateVideo({ model: 'gemini-omni', prompt: 'p', voice_asset_ids: [1] }), ['/character_asset_ids'])
  const a = validateVideo({ model: 'gemini-omni', prompt: 'p', voice_asset_ids: [1, 2], character_asset_ids: [3] })
  t.same([a.voice_asset_ids, a.character_asset_ids], [[1, 2], [3]])
  t.equal(validateVideo({ model: 'gemini-omni', prompt: 'p', voice_asset_ids: [1], reference_image_urls: [IMG] }).reference_image_urls.length, 1, 'reference images are a character')
})

t.test('gemini-omni refuses image_url, frames and generate_audio', async t => {
  const ok = { model: 'gemini-omni', prompt: 'p', voice_asset_ids: [1], character_asset_ids: [1] }
  unsupported(t, () => validateVideo({ ...ok, image_url: IMG }), 'image_url')
  unsupported(t, () => validateVideo({ ...ok, first_frame_url: IMG }), 'first_frame_url')
  unsupported(t, () => validateVideo({ ...ok, last_frame_url: IMG }), 'last_frame_url')
  unsupported(t, () => validateVideo({ ...ok, generate_audio: true }), 'generate_audio')
  t.equal(validateVideo(ok).generate_audio, null)
})

t.test('asset ids on any model but gemini-omni answer 422', async t => {
  unsupported(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', character_asset_ids: [1] }), 'character_asset_ids')
  unsupported(t, () => validateVideo({ model: 'veo3-fast', prompt: 'p', voice_asset_ids: [1] }), 'voice_asset_ids')
})

t.test('lipsync needs image_url, audio_url and audio_duration within the mode cap', async t => {
  const ok = { model: 'lipsync', image_url: IMG, audio_url: AUD, audio_duration: 15 }
  const r = validateVideo(ok)
  t.match(r, { image_url: IMG, audio_url: AUD, audio_duration: 15, lip_sync_mode: 'normal', aspect_ratio: null, duration: null })
  t.equal(validateVideo({ ...ok, image_url: undefined, first_frame_url: IMG2 }).image_url, IMG2, 'first_frame_url is the image too')
  required(t, () => validateVideo({ ...ok, image_url: undefined }), ['/image_url'])
  required(t, () => validateVideo({ ...ok, audio_url: undefined }), ['/audio_url'])
  required(t, () => validateVideo({ ...ok, audio_duration: undefined }), ['/audio_duration'])
  unsupported(t, () => validateVideo({ ...ok, audio_duration: 15.01 }), 'audio_duration', 'normal caps at 15 s')
  unsupported(t, () => validateVideo({ ...ok, lip_sync_mode: 'normal', audio_duration: 16 }), 'audio_duration')
  t.equal(validateVideo({ ...ok, lip_sync_mode: 'collate', audio_duration: 120 }).credits, 635, 'collate goes to 120 s')
  t.equal(validateVideo({ ...ok, lip_sync_mode: 'trim', audio_duration: 120 }).credits, 110, 'trim goes to 120 s')
  unsupported(t, () => validateVideo({ ...ok, mode: 'normal' }), 'mode', 'lip_sync_mode, not mode')
  unsupported(t, () => validateVideo({ ...ok, last_frame_url: IMG }), 'last_frame_url')
  unsupported(t, () => validateVideo({ ...ok, generate_audio: true }), 'generate_audio')
})

t.test('lipsync fields on any other model answer 422', async t => {
  unsupported(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', audio_url: AUD }), 'audio_url')
  unsupported(t, () => validateVideo({ model: 'seedance-2', prompt: 'p', audio_duration: 5 }), 'audio_duration')
  unsupported(t, () => validateVideo({ model: 'veo3-fast', prompt: 'p', lip_sync_mode: 'trim' }), 'lip_sync_mode')
})

t.test('wan-3.0 with a reference video limits duration to 15 s', async t => {
  for (const model of ['wan-3.0', 'wan-3.0-prime']) {
    t.equal(validateVideo({ model, prompt: 'p', duration: '15', reference_video_urls: [VID] }).duration, '15', `${model} 15 s with a reference video`)
    unsupported(t, () => validateVideo({ model, prompt: 'p', duration: '20', reference_video_urls: [VID] }), 'duration', `${model} 20 s with a reference video`)
    unsupported(t, () => validateVideo({ model, prompt: 'p', duration: '30', reference_video_urls: [VID] }), 'duration', `${model} 30 s with a reference video`)
    t.equal(validateVideo({ model, prompt: 'p', duration: '30', reference_image_urls: [IMG] }).duration, '30', `${model} 30 s with reference images only`)
    t.equal(validateVideo({ model, prompt: 'p', duration: '30' }).duration, '30', `${model} 30 s without references`)
  }
})

t.test('minimax-h3 adaptive needs a frame or reference media', async t => {
  unsupported(t, () => validateVideo({ model: 'minimax-h3', prompt: 'p', aspect_ratio: 'adaptive' }), 'aspect_ratio')
  unsupported(t, () => validateVideo({ model: 'minimax-h3', prompt: 'p', aspect_ratio: 'adaptive', reference_audio_urls: [AUD] }), 'aspect_ratio', 'audio is not visual')
  t.equal(validateVideo({ model: 'minimax-h3', prompt: 'p', aspect_ratio: 'adaptive', image_url: IMG }).aspect_ratio, 'adaptive')
  t.equal(validateVideo({ model: 'minimax-h3', prompt: 'p', aspect_ratio: 'adaptive', reference_image_urls: [IMG] }).aspect_ratio, 'adaptive')
  t.equal(validateVideo({ model: 'minimax-h3', prompt: 'p', aspect_ratio: 'adaptive', reference_video_urls: [VID] }).aspect_ratio, 'adaptive')
  t.equal(validateVideo({ model: 'minimax-h3', prompt: 'p' }).aspect_ratio, '16:9')
})

t.test('minimax-h3 always has sound: generate_audio false answers 422, true is accepted', async t => {
  unsupported(t, () => validateVideo({ model: 'minimax-h3', prompt: 'p', generate_audio: false }), 'generate_audio')
  t.equal(validateVideo({ model: 'minimax-h3', prompt: 'p', generate_audio: true }).generate_audio, true)
  t.equal(validateVideo({ model: 'minimax-h3', prompt: 'p' }).generate_audio, true)
})

t.test('seedance-2.5 and wan frames force aspect_ratio adaptive; a conflicting explicit ratio is rejected', async t => {
  for (const model of ['seedance-2.5', 'wan-3.0', 'wan-3.0-prime']) {
    t.equal(validateVideo({ model, prompt: 'p', image_url: IMG }).aspect_ratio, 'adaptive', `${model} first frame, ratio omitted`)
    t.equal(validateVideo({ model, prompt: 'p', first_frame_url: IMG, last_frame_url: IMG2 }).aspect_ratio, 'adaptive', `${model} first and last frame`)
    t.equal(validateVideo({ model, prompt: 'p', image_url: IMG, aspect_ratio: 'adaptive' }).aspect_ratio, 'adaptive', `${model} explicit adaptive`)
    unsupported(t, () => validateVideo({ model, prompt: 'p', image_url: IMG, aspect_ratio: '16:9' }), 'aspect_ratio', `${model} frame + 16:9`)
    t.equal(validateVideo({ model, prompt: 'p', aspect_ratio: '9:16' }).aspect_ratio, '9:16', `${model} without frames keeps the ratio`)
  }
  t.equal(validateVideo({ model: 'seedance-2', prompt: 'p', image_url: IMG, aspect_ratio: '1:1' }).aspect_ratio, '1:1', 'other models do not force adaptive')
})

t.test('kling-3.0 options sound, multi_shots, multi_prompt, kling_elements only on kling-3.0', async t => {
  const r = validateVideo({ model: 'kling-3.0', prompt: 'p', sound: false, multi_shots: true, multi_prompt: Array(5).fill({ prompt: 'x' }), kling_elements: Array(3).fill({ id: 1 }) })
  t.match(r, { sound: false, multi_shots: true })
  t.equal(r.multi_prompt?.length, 5)
  t.equal(r.kling_elements?.length, 3)
  t.equal(validateVideo({ model: 'kling-3.0', prompt: 'p' }).sound, null, 'sound omitted: inferred from the prompt')
  for (const model of ['grok-video', 'seedance-2', 'veo3-fast']) {
    unsupported(t, () => validateVideo({ model, prompt: 'p', sound: true }), 'sound', `${model} sound`)
    unsupported(t, () => validateVideo({ model, prompt: 'p', multi_shots: false }), 'multi_shots', `${model} multi_shots`)
    unsupported(t, () => validateVideo({ model, prompt: 'p', multi_prompt: [{}] }), 'multi_prompt', `${model} multi_prompt`)
    unsupported(t, () => validateVideo({ model, prompt: 'p', kling_elements: [{}] }), 'kling_elements', `${model} kling_elements`)
  }
})

t.test('generate_audio only on the models that take it, default true', async t => {
  for (const model of ['seedance-2-fast', 'seedance-2', 'seedance-2-mini', 'seedance-2.5', 'wan-3.0', 'wan-3.0-prime', 'seedance-1.5-pro']) {
    t.equal(validateVideo({ model, prompt: 'p' }).generate_audio, true, `${model} defaults to true`)
    t.equal(validateVideo({ model, prompt: 'p', generate_audio: false }).generate_audio, false, `${model} accepts false`)
  }
  for (const model of ['veo3-fast', 'grok-video', 'kling-3.0', 'seedance-v1-pro']) {
    unsupported(t, () => validateVideo({ model, prompt: 'p', generate_audio: true }), 'generate_audio', `${model} refuses generate_audio`)
  }
})

t.test('a text-to-video request without a prompt answers 400 naming prompt', async t => {
  required(t, () => validateVideo({ model: 'seedance-2' }), ['/prompt'])
  required(t, () => validateVideo({ model: 'veo3-fast', aspect_ratio: '9:16' }), ['/prompt'])
  t.equal(validateVideo({ model: 'seedance-2', image_url: IMG }).prompt, null, 'an image is enough')
  t.equal(validateVideo({ model: 'seedance-2', reference_video_urls: [VID] }).prompt, null, 'reference media is enough')
})

// ---- URL policy ------------------------------------------------------------------------------

t.test('webhook_url must be https and publicly routable (422 param webhook_url)', async t => {
  const base = { model: 'veo3-fast', prompt: 'p' }
  t.equal(validateVideo({ ...base, webhook_url: HOOK }).webhook_url, HOOK)
  t.equal(validateVideo({ ...base, webhook_url: 'https://8.8.8.8/hook' }).webhook_url, 'https://8.8.8.8/hook')
  for (const bad of [
    'http://hooks.example.com/x', 'ftp://hooks.example.com/x', 'https://localhost/x', 'https://api.localhost/x',
    'https://127.0.0.1/x', 'https://10.1.2.3/x', 'https://172.16.0.1/x', 'https://192.168.1.1/x', 'https://169.254.169.254/latest',
    'https://100.64.0.1/x', 'https://0.0.0.0/x', 'https://[::1]/x', 'https://[fd00::1]/x', 'https://[fe80::1]/x',
    'https://[::ffff:10.0.0.1]/x', 'https://2130706433/x', 'https://0x7f.0.0.1/x', 'https://224.0.0.1/x', 'https://255.255.255.255/x',
  ]) {
    unsupported(t, () => validateVideo({ ...base, webhook_url: bad }), 'webhook_url', `${bad} refused`)
  }
  unsupported(t, () => validateImage({ model: 'nano-banana', prompt: 'p', webhook_url: 'http://x.example.com' }), 'webhook_url')
  unsupported(t, () => validateAudio({ model: 'music', instrumental: true, webhook_url: 'https://127.0.0.1' }), 'webhook_url')
  unsupported(t, () => validateExtend({ job_id: 'job_1', prompt: 'p', webhook_url: 'https://192.168.0.1' }), 'webhook_url')
})

t.test('hosts in WEBHOOK_ALLOWLIST may be plain http and private', async t => {
  const opts: ValidateOptions = { webhookAllowlist: ['localhost:9999', '10.0.0.5', 'receiver.internal'] }
  const base = { model: 'veo3-fast', prompt: 'p' }
  t.equal(validateVideo({ ...base, webhook_url: 'http://localhost:9999/hook' }, opts).webhook_url, 'http://localhost:9999/hook')
  t.equal(validateVideo({ ...base, webhook_url: 'http://10.0.0.5:1234/hook' }, opts).webhook_url, 'http://10.0.0.5:1234/hook', 'a host entry admits any port')
  t.ok(validateVideo({ ...base, webhook_url: 'http://receiver.internal/hook' }, opts))
  unsupported(t, () => validateVideo({ ...base, webhook_url: 'http://localhost:8888/hook' }, opts), 'webhook_url', 'a host:port entry admits only that port')
  unsupported(t, () => validateVideo({ ...base, webhook_url: 'http://localhost:9999/hook' }), 'webhook_url', 'without the allowlist')
  t.ok(validateVideo({ ...base, webhook_url: 'https://receiver.internal:443/x' }, { webhookAllowlist: ['receiver.internal:443'] }), 'the default port matches an explicit :443 entry')
})

t.test('webhook_secret without webhook_url answers 400 naming webhook_url', async t => {
  required(t, () => validateVideo({ model: 'veo3-fast', prompt: 'p', webhook_secret: 's'.repeat(20) }), ['/webhook_url'])
  required(t, () => validateExtend({ job_id: 'job_1', prompt: 'p', webhook_secret: 's'.repeat(20) }), ['/webhook_url'])
})

t.test('media URLs must be public http(s); our own PUBLIC_BASE_URL is always accepted', async t => {
  const base = { model: 'seedance-2', prompt: 'p' }
  unsupported(t, () => validateVideo({ ...base, image_url: 'http://127.0.0.1/a.png' }), 'image_url')
  unsupported(t, () => validateVideo({ ...base, first_frame_url: 'http://localhost/a.png' }), 'first_frame_url')
  unsupported(t, () => validateVideo({ ...base, first_frame_url: IMG, last_frame_url: 'http://192.168.0.2/b.png' }), 'last_frame_url')
  unsupported(t, () => validateVideo({ ...base, reference_image_urls: [IMG, 'https://10.0.0.1/a.png'] }), 'reference_image_urls')
  unsupported(t, () => validateVideo({ ...base, reference_video_urls: ['https://[::1]/a.mp4'] }), 'reference_video_urls')
  unsupported(t, () => validateVideo({ ...base, reference_audio_urls: ['ftp://cdn.example.com/a.mp3'] }), 'reference_audio_urls')
  unsupported(t, () => validateVideo({ model: 'lipsync', image_url: IMG, audio_url: 'http://169.254.169.254/a.mp3', audio_duration: 3 }), 'audio_url')
  unsupported(t, () => validateImage({ model: 'nano-banana', prompt: 'p', image_urls: ['http://127.0.0.1:8080/x.png'] }), 'image_urls')
  t.equal(validateVideo({ ...base, image_url: 'http://cdn.example.com/a.png' }).image_url, 'http://cdn.example.com/a.png', 'plain http is fine for media')
  const opts: ValidateOptions = { publicBaseUrl: 'http://localhost:8080' }
  t.ok(validateVideo({ ...base, image_url: 'http://localhost:8080/files/u/a.png' }, opts), 'our own upload URL')
  t.ok(validateImage({ model: 'nano-banana', prompt: 'p', image_urls: ['http://localhost:8080/files/a.png'] }, opts))
  unsupported(t, () => validateVideo({ ...base, image_url: 'http://localhost:8081/files/a.png' }, opts), 'image_url', 'another port is not ours')
  const sub: ValidateOptions = { publicBaseUrl: 'http://10.0.0.9/api' }
  t.ok(validateVideo({ ...base, image_url: 'http://10.0.0.9/api/files/a.png' }, sub), 'under a base path')
  unsupported(t, () => validateVideo({ ...base, image_url: 'http://10.0.0.9/apix/a.png' }, sub), 'image_url', 'a sibling path is not under the base')
})

// ---- Image and audio rules -------------------------------------------------------------------

t.test('image edit mode when image_urls is present', async t => {
  const gen = validateImage({ model: 'nano-banana', prompt: 'a cat' })
  t.match(gen, { kind: 'image', mode: 'generate', aspect_ratio: '1:1', output_format: 'png', resolution: null, image_urls: [] })
  const edit = validateImage({ model: 'nano-banana', prompt: 'make it blue', image_urls: [IMG] })
  t.match(edit, { mode: 'edit', aspect_ratio: 'auto', image_urls: [IMG] })
  t.equal(validateImage({ model: 'nano-banana', prompt: 'p', image_urls: [] }).mode, 'generate', 'an empty list is not an edit')
  t.equal(validateImage({ model: 'gpt-image-2', prompt: 'p', image_urls: [IMG], aspect_ratio: '16:9' }).aspect_ratio, '16:9')
})

t.test('image resolutions are normalised to upper case; flat-priced models refuse resolution', async t => {
  t.equal(validateImage({ model: 'gpt-image-2', prompt: 'p', resolution: '2k' }).resolution, '2K')
  t.equal(validateImage({ model: 'nano-banana-2.1', prompt: 'p', resolution: '4k' }).resolution, '4K')
  t.equal(validateImage({ model: 'nano-banana-2.1', prompt: 'p' }).resolution, '1K')
  for (const model of ['nano-banana', 'nano-banana-pro', 'grok-image']) {
    unsupported(t, () => validateImage({ model, prompt: 'p', resolution: '2K' }), 'resolution', `${model} has one flat price`)
  }
})

t.test('an image request without a prompt answers 400 naming prompt', async t => {
  required(t, () => validateImage({ model: 'nano-banana' }), ['/prompt'])
  required(t, () => validateImage({ model: 'gpt-image-2', image_urls: [IMG] }), ['/prompt'])
})

t.test('voiceover needs text and voice_id and takes no music fields', async t => {
  t.match(validateAudio({ model: 'voiceover', text: 'Hello there', voice_id: 'v1', voice_name: 'Ada' }), {
    kind: 'audio', model: 'voiceover', text: 'Hello there', voice_id: 'v1', voice_name: 'Ada', prompt: 'Hello there', spoken_seconds: 1, lyrics: null, instrumental: null,
  })
  required(t, () => validateAudio({ model: 'voiceover', voice_id: 'v1' }), ['/text'])
  required(t, () => validateAudio({ model: 'voiceover', text: 'hi' }), ['/voice_id'])
  unsupported(t, () => validateAudio({ model: 'voiceover', text: 'hi', voice_id: 'v', lyrics: 'x' }), 'lyrics')
  unsupported(t, () => validateAudio({ model: 'voiceover', text: 'hi', voice_id: 'v', instrumental: true }), 'instrumental')
  unsupported(t, () => validateAudio({ model: 'voiceover', text: 'hi', voice_id: 'v', style: 'x' }), 'style')
  unsupported(t, () => validateAudio({ model: 'voiceover', text: 'hi', voice_id: 'v', title: 'x' }), 'title')
})

t.test('music needs lyrics unless instrumental and takes no voiceover fields', async t => {
  t.match(validateAudio({ model: 'music', lyrics: 'la la', title: 'T', style: 'pop' }), { model: 'music', lyrics: 'la la', instrumental: false, prompt: 'pop', text: null })
  t.match(validateAudio({ model: 'music', instrumental: true, title: 'T' }), { instrumental: true, lyrics: null, prompt: 'T' })
  required(t, () => validateAudio({ model: 'music', title: 'T' }), ['/lyrics'])
  required(t, () => validateAudio({ model: 'music', instrumental: false }), ['/lyrics'])
  required(t, () => validateAudio({ model: 'music', lyrics: '   ' }), ['/lyrics'], 'blank lyrics are no lyrics')
  unsupported(t, () => validateAudio({ model: 'music', instrumental: true, lyrics: 'la' }), 'lyrics', 'instrumental takes no lyrics')
  unsupported(t, () => validateAudio({ model: 'music', lyrics: 'la', text: 'x' }), 'text')
  unsupported(t, () => validateAudio({ model: 'music', lyrics: 'la', voice_id: 'x' }), 'voice_id')
})

// ---- Normalised shape ------------------------------------------------------------------------

t.test('a video request normalises to the full shape with price and estimate', async t => {
  t.same(validateVideo({ model: 'seedance-2', prompt: 'waves', resolution: '720P', duration: '10', reference_video_urls: [VID], webhook_url: HOOK }), {
    kind: 'video',
    model: 'seedance-2',
    prompt: 'waves',
    aspect_ratio: '16:9',
    duration: '10',
    resolution: '720p',
    mode: null,
    image_url: null,
    last_frame_url: null,
    reference_image_urls: [],
    reference_video_urls: [VID],
    reference_audio_urls: [],
    generate_audio: true,
    sound: null,
    multi_shots: null,
    multi_prompt: null,
    kling_elements: null,
    audio_url: null,
    audio_duration: null,
    lip_sync_mode: null,
    character_asset_ids: [],
    voice_asset_ids: [],
    webhook_url: HOOK,
    webhook_secret: null,
    credits: 800,
    estimated_seconds: 350,
  })
})

t.test('validation does not modify the request body', async t => {
  const body = { model: 'seedance-2.5', prompt: 'p', image_url: IMG, resolution: '720P', reference_image_urls: [] as string[] }
  const copy = structuredClone(body)
  validateVideo(body)
  t.same(body, copy)
})

// ---- Batch -----------------------------------------------------------------------------------

t.test('a batch envelope that is not {jobs: 1..10 items} answers 400 for the whole batch', async t => {
  hasIssue(t, invalid(t, () => validateBatch({})), '/jobs', /required/)
  hasIssue(t, invalid(t, () => validateBatch({ jobs: [] })), '/jobs')
  hasIssue(t, invalid(t, () => validateBatch({ jobs: Array(11).fill({ type: 'image', model: 'nano-banana', prompt: 'p' }) })), '/jobs')
  hasIssue(t, invalid(t, () => validateBatch({ jobs: {} })), '/jobs')
  hasIssue(t, invalid(t, () => validateBatch({ jobs: [{}], extra: 1 })), '/extra')
  t.equal(validateBatch({ jobs: Array(10).fill({ type: 'image', model: 'nano-banana', prompt: 'p' }) }).length, 10)
})

t.test('batch items are validated one by one; a bad item does not stop the others', async t => {
  const results = validateBatch({
    jobs: [
      { type: 'video', model: 'veo3-fast', prompt: 'p' },
      { type: 'image', model: 'gpt-image-2', prompt: 'p', resolution: '4k' },
      { type: 'video', model: 'veo3-fast', prompt: 'p', duration: '8' },
      { type: 'image', model: 'nano-banana', prompt: 3 },
      { model: 'nano-banana', prompt: 'p' },
      { type: 'audio', model: 'music' },
      'not an object',
      { type: 'video', model: 'wan-3.0', prompt: 'p' },
      { type: 'image', model: 'veo3-fast', prompt: 'p' },
    ],
  })
  t.equal(results.length, 9)
  t.match(results[0], { index: 0, type: 'video', ok: true, request: { kind: 'video', model: 'veo3-fast', credits: 120 } })
  t.match(results[1], { index: 1, type: 'image', ok: true, request: { kind: 'image', resolution: '4K', credits: 30 } })
  t.match(results[2], { index: 2, type: 'video', ok: false, error: { code: 'UNSUPPORTED_OPTION', extra: { param: 'duration' } } })
  t.match(results[3], { index: 3, type: 'image', ok: false, error: { code: 'VALIDATION_ERROR', extra: { details: [{ path: '/jobs/3/prompt' }] } } })
  t.match(results[4], { index: 4, type: null, ok: false, error: { code: 'VALIDATION_ERROR', extra: { details: [{ path: '/jobs/4/type', message: 'is required' }] } } })
  t.match(results[5], { index: 5, type: null, ok: false, error: { code: 'VALIDATION_ERROR', extra: { details: [{ path: '/jobs/5/type' }] } } })
  t.match(results[6], { index: 6, type: null, ok: false, error: { code: 'VALIDATION_ERROR', extra: { details: [{ path: '/jobs/6' }] } } })
  t.match(results[7], { index: 7, ok: true, request: { model: 'wan-3.0', credits: 80 } })
  t.match(results[8], { index: 8, type: 'image', ok: false, error: { code: 'UNSUPPORTED_OPTION', extra: { param: 'model' } } })
})

t.test('batch items reject unknown fields with paths into the batch body', async t => {
  const [r] = validateBatch({ jobs: [{ type: 'video', model: 'veo3-fast', prompt: 'p', n: 2 }] })
  t.match(r, { ok: false, error: { code: 'VALIDATION_ERROR', extra: { details: [{ path: '/jobs/0/n', message: 'is not a known field' }] } } })
})
