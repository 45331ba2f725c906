/**
 * Request validation for every generation endpoint (docs/api.md "Jobs"), in two layers:
 *
 * 1. Schema (schemas.ts, compiled by Ajv once at module load): types, lengths, enums, formats,
 *    array maxima, unknown fields. Failure: 400 VALIDATION_ERROR, `details` lists every problem
 *    as `{path, message}` (path is a JSON Pointer into the body, `''` for the body itself).
 * 2. Model rules (models.ts): what the chosen model accepts. Failure: 422 UNSUPPORTED_OPTION with
 *    `param` naming the field; the first broken rule is reported. A field the model (or another
 *    field) makes required but that is missing is a schema problem: 400 VALIDATION_ERROR.
 *
 * An unknown model id is answered before both layers with 422 UNSUPPORTED_OPTION, `param:
 * model`: the value is well-formed, the catalogue just does not sell it (docs/api.md "Jobs": options a
 * model does not support are rejected with 422").
 *
 * A successful call returns the normalised request: defaults filled in, aliases resolved,
 * resolutions in canonical case, plus its price in credits and the catalogue estimate.
 * Pure: no I/O. Asset ownership (gemini-omni ids) and the extend source job are checked by the
 * callers that own that data.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv'
import addFormatsModule from 'ajv-formats'
import { ApiError } from '../errors.js'
import {
  audioModel, EXTEND, imageModel, videoModel,
  type AudioModelId, type ImageAspectRatio, type ImageModelId, type ImageOutputFormat,
  type ImageResolution, type LipSyncMode, type VideoAspectRatio, type VideoDuration,
  type VideoMode, type VideoModelId, type VideoResolution,
} from './models.js'
import { characterCount, priceAudio, priceExtend, priceImage, priceVideo, spokenSeconds } from './pricing.js'
import {
  AudioRequest, BatchEnvelope, ExtendRequest, ImageBatchItem, ImageRequest, VideoBatchItem, VideoRequest,
  type AudioRequestBody, type ExtendRequestBody, type ImageRequestBody, type VideoRequestBody,
} from './schemas.js'
import { checkMediaUrl, checkWebhookUrl, type UrlPolicy } from './url.js'

// ajv-formats is CommonJS; under NodeNext its default import is the module object's default.
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default

const ajv = new Ajv({ allErrors: true, strict: true })
addFormats(ajv, ['uri'])

const checkVideo = ajv.compile<VideoRequestBody>(VideoRequest)
const checkImage = ajv.compile<ImageRequestBody>(ImageRequest)
const checkAudio = ajv.compile<AudioRequestBody>(AudioRequest)
const checkExtend = ajv.compile<ExtendRequestBody>(ExtendRequest)
const checkVideoItem = ajv.compile<VideoRequestBody & { type: 'video' }>(VideoBatchItem)
const checkImageItem = ajv.compile<ImageRequestBody & { type: 'image' }>(ImageBatchItem)
const checkBatchEnvelope = ajv.compile<{ jobs: unknown[] }>(BatchEnvelope)

/** Where media and webhook URLs may point: WEBHOOK_ALLOWLIST and PUBLIC_BASE_URL (docs/operations.md "Configuration"). */
export type ValidateOptions = UrlPolicy

/** One schema problem, as listed in a VALIDATION_ERROR's `details`. */
export interface ValidationIssue { path: string; message: string }

/** Normalised POST /v1/generate/video request. Options a model does not take are null. */
export interface NormalizedVideoRequest {
  kind: 'video'
  model: VideoModelId
  prompt: string | null
  /** `adaptive` when a first/last frame forces it (seedance-2.5, wan); null for lipsync. */
  aspect_ratio: VideoAspectRatio | null
  /** Seconds as a string; null for veo3 (fixed ~8 s) and lipsync. */
  duration: VideoDuration | null
  /** Lower-case; null for veo3 and kling-3.0. */
  resolution: VideoResolution | null
  mode: VideoMode | null
  /** The first frame / start image: first_frame_url when sent, else image_url. */
  image_url: string | null
  last_frame_url: string | null
  reference_image_urls: string[]
  reference_video_urls: string[]
  reference_audio_urls: string[]
  /** true/false for models that take it (default true; minimax-h3 always true), else null. */
  generate_audio: boolean | null
  /** kling-3.0: as sent, null = inferred from the prompt. */
  sound: boolean | null
  multi_shots: boolean | null
  multi_prompt: Record<string, unknown>[] | null
  kling_elements: Record<string, unknown>[] | null
  audio_url: string | null
  audio_duration: number | null
  /** lipsync only; default normal. */
  lip_sync_mode: LipSyncMode | null
  character_asset_ids: number[]
  voice_asset_ids: number[]
  webhook_url: string | null
  webhook_secret: string | null
  /** Price in credits (docs/api.md "Jobs"), surcharge included. */
  credits: number
  /** Catalogue estimate of time to result. */
  estimated_seconds: number
}

/** Normalised POST /v1/generate/image request. */
export interface NormalizedImageRequest {
  kind: 'image'
  model: ImageModelId
  prompt: string
  /** `edit` when image_urls is non-empty (docs/api.md "Jobs"). */
  mode: 'generate' | 'edit'
  aspect_ratio: ImageAspectRatio
  /** Upper-case; null for the flat-priced models, which take no resolution. */
  resolution: ImageResolution | null
  output_format: ImageOutputFormat
  image_urls: string[]
  webhook_url: string | null
  webhook_secret: string | null
  credits: number
  estimated_seconds: number
}

/** Normalised POST /v1/generate/audio request. Fields of the other audio model are null. */
export interface NormalizedAudioRequest {
  kind: 'audio'
  model: AudioModelId
  /** What the Job shows as its prompt: the voiceover text, or the music style (else title). */
  prompt: string | null
  text: string | null
  voice_id: string | null
  voice_name: string | null
  /** voiceover: estimated spoken seconds, ceil(characters / 15), the basis of the price. */
  spoken_seconds: number | null
  title: string | null
  style: string | null
  instrumental: boolean | null
  lyrics: string | null
  webhook_url: string | null
  webhook_secret: string | null
  credits: number
  estimated_seconds: number
}

/** Normalised POST /v1/extend/video request; the source job is checked by the job service. */
export interface NormalizedExtendRequest {
  kind: 'extend'
  job_id: string
  prompt: string
  webhook_url: string | null
  webhook_secret: string | null
  credits: number
  estimated_seconds: number
}

export type NormalizedRequest = NormalizedVideoRequest | NormalizedImageRequest | NormalizedAudioRequest | NormalizedExtendRequest

/** One item of POST /v1/batch: its normalised request or the error it alone would get. */
export type BatchItemResult =
  | { index: number; type: 'video' | 'image'; ok: true; request: NormalizedVideoRequest | NormalizedImageRequest }
  | { index: number; type: 'video' | 'image' | null; ok: false; error: ApiError }

// ---- Schema layer --------------------------------------------------------------------------

/** Enough to fix a request; a pathological body does not get a megabyte of details. */
const MAX_ISSUES = 100

function pointerToken (s: string): string {
  return s.replace(/~/g, '~0').replace(/\//g, '~1')
}

function issueOf (e: ErrorObject, prefix: string): ValidationIssue {
  const at = prefix + e.instancePath
  const p = e.params as Record<string, unknown>
  switch (e.keyword) {
    case 'additionalProperties':
      return { path: `${at}/${pointerToken(String(p.additionalProperty))}`, message: 'is not a known field' }
    case 'required':
      return { path: `${at}/${pointerToken(String(p.missingProperty))}`, message: 'is required' }
    case 'enum':
      return { path: at, message: `must be one of: ${(p.allowedValues as unknown[]).join(', ')}` }
    case 'const':
      return { path: at, message: `must be ${JSON.stringify(p.allowedValue)}` }
    case 'format':
      return { path: at, message: p.format === 'uri' ? 'must be an absolute URI' : `must be a valid ${String(p.format)}` }
    default:
      return { path: at, message: e.message ?? 'is invalid' }
  }
}

/**
 * Ajv errors as issues, the one `details` shape of every route: a wrong type hides
 * the other complaints about the same value, and a union of literals (TypeBox `Union` of
 * `Literal`, which fails as one `const` per branch plus an `anyOf`) is one issue naming the
 * allowed values.
 */
export function issuesOf (errors: readonly ErrorObject[], prefix = ''): ValidationIssue[] {
  const wrongType = new Set(errors.filter(e => e.keyword === 'type').map(e => e.instancePath))
  const anyOfAt = new Set(errors.filter(e => e.keyword === 'anyOf').map(e => e.instancePath))
  const constsAt = new Map<string, unknown[]>()
  for (const e of errors) {
    if (e.keyword === 'const' && anyOfAt.has(e.instancePath)) {
      const list = constsAt.get(e.instancePath) ?? []
      list.push((e.params as { allowedValue: unknown }).allowedValue)
      constsAt.set(e.instancePath, list)
    }
  }
  const out: ValidationIssue[] = []
  const merged = new Set<string>()
  for (const e of errors) {
    if (e.keyword !== 'type' && wrongType.has(e.instancePath)) continue
    const values = constsAt.get(e.instancePath)
    if (values && (e.keyword === 'const' || e.keyword === 'anyOf')) {
      if (merged.has(e.instancePath)) continue
      merged.add(e.instancePath)
      out.push({ path: prefix + e.instancePath, message: `must be one of: ${values.map(v => typeof v === 'string' ? v : JSON.stringify(v)).join(', ')}` })
    } else {
      out.push(issueOf(e, prefix))
    }
    if (out.length >= MAX_ISSUES) break
  }
  return out
}

/** The one VALIDATION_ERROR of every route: `details` as issues, the first three in the message. */
export function validationError (details: ValidationIssue[], what = 'Request'): ApiError {
  return new ApiError('VALIDATION_ERROR', `${what} failed validation: ${details.map(d => `${d.path || 'body'} ${d.message}`).slice(0, 3).join('; ')}`, { details })
}

function schemaCheck<T> (check: ValidateFunction<T>, body: unknown, prefix: string): T {
  if (check(body)) return body
  throw validationError(issuesOf(check.errors ?? [], prefix))
}

function isObject (v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

/** Unknown model ids are 422 with `param: model`, before the schema (see the file comment). */
function checkModelKnown (body: unknown, kind: 'video' | 'image' | 'audio'): void {
  if (!isObject(body) || !Object.hasOwn(body, 'model') || typeof body.model !== 'string') return
  const id = body.model
  const known = kind === 'video' ? videoModel(id) : kind === 'image' ? imageModel(id) : audioModel(id)
  if (known) return
  const other = videoModel(id) ? 'video' : imageModel(id) ? 'image' : audioModel(id) ? 'audio' : null
  const hint = other ? `; ${id} is ${other === 'image' ? 'an' : 'a'} ${other} model (POST /v1/generate/${other})` : '; GET /v1/models lists the models'
  throw new ApiError('UNSUPPORTED_OPTION', `Unknown ${kind} model ${JSON.stringify(id).slice(0, 120)}${hint}`, { param: 'model' })
}

// ---- Model rules ---------------------------------------------------------------------------

function unsupported (param: string, message: string): never {
  throw new ApiError('UNSUPPORTED_OPTION', message, { param })
}

/**
 * Conditionally required fields (a model or another field needs them): a missing field is a
 * schema problem, 400 VALIDATION_ERROR with `details` naming it, not 422.
 */
function missing (...issues: Array<[field: string, message: string]>): never {
  throw validationError(issues.map(([f, m]) => ({ path: `/${pointerToken(f)}`, message: m })))
}

/** Sent, counting an empty array as not sent. */
function present (v: unknown): boolean {
  return v !== undefined && !(Array.isArray(v) && v.length === 0)
}

function oneOf (values: readonly string[]): string {
  return values.join(', ')
}

function checkWebhook (b: { webhook_url?: string; webhook_secret?: string }, opts: ValidateOptions): void {
  if (b.webhook_url !== undefined) checkWebhookUrl(b.webhook_url, opts, 'webhook_url')
  else if (b.webhook_secret !== undefined) missing(['webhook_url', 'is required when webhook_secret is sent'])
}

function videoRules (b: VideoRequestBody, opts: ValidateOptions): NormalizedVideoRequest {
  const m = videoModel(b.model)
  if (!m) return unsupported('model', `Unknown video model ${b.model}`)
  const id = m.id

  // Options this model does not take at all (GET /v1/models).
  if (b.aspect_ratio !== undefined && m.aspectRatios.length === 0) unsupported('aspect_ratio', `${id} does not take aspect_ratio`)
  if (b.duration !== undefined && m.durations.length === 0) {
    unsupported('duration', m.price.kind === 'flat' ? `${id} has a fixed length of about 8 seconds; do not send duration` : `${id} does not take duration`)
  }
  if (b.resolution !== undefined && m.resolutions.length === 0) unsupported('resolution', `${id} does not take resolution`)
  if (b.mode !== undefined && m.modes.length === 0) unsupported('mode', `${id} does not take mode`)
  if (!m.firstFrame) {
    if (b.image_url !== undefined) unsupported('image_url', `${id} does not take image_url`)
    if (b.first_frame_url !== undefined) unsupported('first_frame_url', `${id} does not take first_frame_url`)
  }
  if (b.last_frame_url !== undefined && !m.lastFrame) unsupported('last_frame_url', `${id} does not take last_frame_url`)
  if (present(b.reference_image_urls) && m.maxReferenceImages === 0) unsupported('reference_image_urls', `${id} does not take reference_image_urls`)
  if (present(b.reference_video_urls) && m.maxReferenceVideos === 0) unsupported('reference_video_urls', `${id} does not take reference_video_urls`)
  if (present(b.reference_audio_urls) && m.maxReferenceAudio === 0) unsupported('reference_audio_urls', `${id} does not take reference_audio_urls`)
  if (b.generate_audio !== undefined) {
    if (m.generateAudio === 'unsupported') unsupported('generate_audio', `${id} does not take generate_audio`)
    if (m.generateAudio === 'always' && !b.generate_audio) unsupported('generate_audio', `${id} always generates sound`)
  }
  if (!m.klingOptions) {
    for (const f of ['sound', 'multi_shots', 'multi_prompt', 'kling_elements'] as const) {
      if (present(b[f])) unsupported(f, `${f} is only for kling-3.0`)
    }
  }
  if (!m.lipsync) {
    for (const f of ['audio_url', 'audio_duration', 'lip_sync_mode'] as const) {
      if (b[f] !== undefined) unsupported(f, `${f} is only for lipsync`)
    }
  }
  if (!m.assets) {
    for (const f of ['character_asset_ids', 'voice_asset_ids'] as const) {
      if (present(b[f])) unsupported(f, `${f} is only for gemini-omni`)
    }
  }

  // Values outside this model's lists.
  const resolution = b.resolution?.toLowerCase() as VideoResolution | undefined
  if (b.aspect_ratio !== undefined && !m.aspectRatios.includes(b.aspect_ratio)) {
    unsupported('aspect_ratio', `${id} supports aspect_ratio ${oneOf(m.aspectRatios)}`)
  }
  if (b.duration !== undefined && !m.durations.includes(b.duration)) unsupported('duration', `${id} supports duration ${oneOf(m.durations)}`)
  if (resolution !== undefined && !m.resolutions.includes(resolution)) unsupported('resolution', `${id} supports resolution ${oneOf(m.resolutions)}`)
  if (b.mode !== undefined && !m.modes.includes(b.mode)) unsupported('mode', `${id} supports mode ${oneOf(m.modes)}`)

  // Frames and reference media (docs/decisions.md "Catalogue and validation", "Frames vs references").
  const firstFrame = b.first_frame_url ?? b.image_url // alias; first_frame_url wins
  const lastFrame = b.last_frame_url
  const hasFrame = firstFrame !== undefined || lastFrame !== undefined
  if (lastFrame !== undefined && firstFrame === undefined) missing(['first_frame_url', 'is required when last_frame_url is sent (or image_url, its alias)'])
  const refImages = b.reference_image_urls ?? []
  const refVideos = b.reference_video_urls ?? []
  const refAudio = b.reference_audio_urls ?? []
  if (hasFrame && !m.lipsync) {
    const ref = refImages.length ? 'reference_image_urls' : refVideos.length ? 'reference_video_urls' : refAudio.length ? 'reference_audio_urls' : null
    if (ref) unsupported(ref, 'First/last frame and reference_* inputs are separate modes; send one or the other')
  }
  if (refImages.length > m.maxReferenceImages) unsupported('reference_image_urls', `${id} takes at most ${m.maxReferenceImages} reference images`)
  if (refVideos.length > m.maxReferenceVideos) unsupported('reference_video_urls', `${id} takes at most ${m.maxReferenceVideos} reference videos`)
  if (refAudio.length > m.maxReferenceAudio) unsupported('reference_audio_urls', `${id} takes at most ${m.maxReferenceAudio} reference audio files`)

  if (b.prompt !== undefined && characterCount(b.prompt) > m.promptCap) unsupported('prompt', `${id} takes prompts of at most ${m.promptCap} characters`)

  // gemini-omni: a voice and a character (GET /v1/models, gemini-omni).
  if (m.assets) {
    const need: Array<[string, string]> = []
    if (!present(b.voice_asset_ids)) need.push(['voice_asset_ids', `is required for ${id} (GET /v1/assets lists voices)`])
    if (!present(b.character_asset_ids) && refImages.length === 0) need.push(['character_asset_ids', `is required for ${id} unless reference_image_urls is sent`])
    if (need.length) missing(...need)
  }

  // lipsync: image, audio and its length, within the mode's cap.
  const lipSyncMode: LipSyncMode | null = m.lipsync ? (b.lip_sync_mode ?? m.defaults.lip_sync_mode ?? 'normal') : null
  if (m.lipsync && lipSyncMode) {
    const need: Array<[string, string]> = []
    if (firstFrame === undefined) need.push(['image_url', 'is required for lipsync'])
    if (b.audio_url === undefined) need.push(['audio_url', 'is required for lipsync'])
    if (b.audio_duration === undefined) need.push(['audio_duration', 'is required for lipsync (seconds of audio)'])
    if (need.length || b.audio_duration === undefined) missing(...need)
    const cap = m.price.kind === 'lipsync' ? m.price.pricing.maxSeconds[lipSyncMode] : 0
    if (b.audio_duration > cap) unsupported('audio_duration', `lipsync ${lipSyncMode} mode takes audio_duration up to ${cap} seconds`)
  }

  // wan: reference videos limit the duration.
  const duration = b.duration ?? m.defaults.duration
  if (m.maxDurationWithReferenceVideo && refVideos.length > 0 && duration !== null &&
      Number(duration) > Number(m.maxDurationWithReferenceVideo)) {
    unsupported('duration', `${id} with reference videos takes duration up to ${m.maxDurationWithReferenceVideo} seconds`)
  }

  // Aspect ratio: frames force adaptive (seedance-2.5, wan); adaptive needs visual input (minimax-h3).
  let aspectRatio = b.aspect_ratio ?? m.defaults.aspect_ratio
  if (m.framesForceAdaptive && hasFrame) {
    if (b.aspect_ratio !== undefined && b.aspect_ratio !== 'adaptive') {
      unsupported('aspect_ratio', `${id} follows the frame's aspect ratio when a first or last frame is sent; omit aspect_ratio or send adaptive`)
    }
    aspectRatio = 'adaptive'
  }
  if (m.adaptiveNeedsVisualInput && aspectRatio === 'adaptive' && !hasFrame && refImages.length === 0 && refVideos.length === 0) {
    unsupported('aspect_ratio', `${id} aspect_ratio adaptive needs a first frame or reference images/videos`)
  }

  // Text-to-video needs text: without a prompt, a frame or reference media there is nothing to generate from.
  if (!m.lipsync && b.prompt === undefined && !hasFrame && refImages.length + refVideos.length + refAudio.length === 0) {
    missing(['prompt', `is required for ${id} when no image or reference media is sent`])
  }

  // URLs last: the cheap option checks above say more about a wrong request.
  for (const f of ['image_url', 'first_frame_url', 'last_frame_url', 'audio_url'] as const) {
    const v = b[f]
    if (v !== undefined) checkMediaUrl(v, f, opts)
  }
  for (const f of ['reference_image_urls', 'reference_video_urls', 'reference_audio_urls'] as const) {
    for (const v of b[f] ?? []) checkMediaUrl(v, f, opts)
  }
  checkWebhook(b, opts)

  const out: NormalizedVideoRequest = {
    kind: 'video',
    model: id,
    prompt: b.prompt ?? null,
    aspect_ratio: aspectRatio,
    duration: m.durations.length ? duration : null,
    resolution: resolution ?? m.defaults.resolution,
    mode: b.mode ?? m.defaults.mode,
    image_url: firstFrame ?? null,
    last_frame_url: lastFrame ?? null,
    reference_image_urls: [...refImages],
    reference_video_urls: [...refVideos],
    reference_audio_urls: [...refAudio],
    generate_audio: m.generateAudio === 'unsupported' ? null : m.generateAudio === 'always' ? true : (b.generate_audio ?? true),
    sound: m.klingOptions ? (b.sound ?? null) : null,
    multi_shots: m.klingOptions ? (b.multi_shots ?? null) : null,
    multi_prompt: m.klingOptions && b.multi_prompt ? [...b.multi_prompt] : null,
    kling_elements: m.klingOptions && b.kling_elements ? [...b.kling_elements] : null,
    audio_url: b.audio_url ?? null,
    audio_duration: b.audio_duration ?? null,
    lip_sync_mode: lipSyncMode,
    character_asset_ids: [...(b.character_asset_ids ?? [])],
    voice_asset_ids: [...(b.voice_asset_ids ?? [])],
    webhook_url: b.webhook_url ?? null,
    webhook_secret: b.webhook_secret ?? null,
    credits: 0,
    estimated_seconds: m.estimatedSeconds,
  }
  out.credits = priceVideo(out)
  return out
}

function imageRules (b: ImageRequestBody, opts: ValidateOptions): NormalizedImageRequest {
  const m = imageModel(b.model)
  if (!m) return unsupported('model', `Unknown image model ${b.model}`)
  const id = m.id
  if (b.resolution !== undefined && m.resolutions.length === 0) unsupported('resolution', `${id} has one flat price and does not take resolution`)
  const resolution = b.resolution?.toUpperCase() as ImageResolution | undefined
  if (resolution !== undefined && !m.resolutions.includes(resolution)) unsupported('resolution', `${id} supports resolution ${oneOf(m.resolutions)}`)
  if (b.aspect_ratio !== undefined && !m.aspectRatios.includes(b.aspect_ratio)) unsupported('aspect_ratio', `${id} supports aspect_ratio ${oneOf(m.aspectRatios)}`)
  if (b.output_format !== undefined && !m.outputFormats.includes(b.output_format)) unsupported('output_format', `${id} supports output_format ${oneOf(m.outputFormats)}`)
  const imageUrls = b.image_urls ?? []
  if (imageUrls.length > m.maxImageUrls) unsupported('image_urls', `${id} takes at most ${m.maxImageUrls} image_urls`)
  if (b.prompt === undefined) missing(['prompt', `is required for ${id}`])
  if (characterCount(b.prompt) > m.promptCap) unsupported('prompt', `${id} takes prompts of at most ${m.promptCap} characters`)
  for (const v of imageUrls) checkMediaUrl(v, 'image_urls', opts)
  checkWebhook(b, opts)

  const edit = imageUrls.length > 0
  const out: NormalizedImageRequest = {
    kind: 'image',
    model: id,
    prompt: b.prompt,
    mode: edit ? 'edit' : 'generate',
    // An edit keeps the source's shape unless told otherwise; a new image is square.
    aspect_ratio: b.aspect_ratio ?? (edit ? 'auto' : '1:1'),
    resolution: m.resolutions.length ? (resolution ?? m.resolutions[0]) : null,
    output_format: b.output_format ?? 'png',
    image_urls: [...imageUrls],
    webhook_url: b.webhook_url ?? null,
    webhook_secret: b.webhook_secret ?? null,
    credits: 0,
    estimated_seconds: m.estimatedSeconds,
  }
  out.credits = priceImage(out)
  return out
}

function audioRules (b: AudioRequestBody, opts: ValidateOptions): NormalizedAudioRequest {
  const m = audioModel(b.model)
  if (!m) return unsupported('model', `Unknown audio model ${b.model}`)
  let spoken: number | null = null
  if (m.id === 'voiceover') {
    for (const f of ['title', 'style', 'instrumental', 'lyrics'] as const) {
      if (b[f] !== undefined) unsupported(f, `${f} is only for music`)
    }
    const need: Array<[string, string]> = []
    if (b.text === undefined) need.push(['text', 'is required for voiceover'])
    if (b.voice_id === undefined) need.push(['voice_id', 'is required for voiceover'])
    if (need.length || b.text === undefined) missing(...need)
    spoken = spokenSeconds(b.text)
  } else {
    for (const f of ['text', 'voice_id', 'voice_name'] as const) {
      if (b[f] !== undefined) unsupported(f, `${f} is only for voiceover`)
    }
    const hasLyrics = b.lyrics !== undefined && b.lyrics.trim() !== ''
    if (b.instrumental === true && hasLyrics) unsupported('lyrics', 'instrumental music takes no lyrics')
    if (b.instrumental !== true && !hasLyrics) missing(['lyrics', b.lyrics === undefined ? 'is required for music unless instrumental is true' : 'must not be blank for music unless instrumental is true'])
  }
  const credits = priceAudio({ model: m.id, text: b.text ?? null }) // voiceover over 300 s: 422 param text
  checkWebhook(b, opts)
  const isVoice = m.id === 'voiceover'
  return {
    kind: 'audio',
    model: m.id,
    prompt: isVoice ? (b.text ?? null) : (b.style ?? b.title ?? null),
    text: isVoice ? (b.text ?? null) : null,
    voice_id: isVoice ? (b.voice_id ?? null) : null,
    voice_name: isVoice ? (b.voice_name ?? null) : null,
    spoken_seconds: spoken,
    title: isVoice ? null : (b.title ?? null),
    style: isVoice ? null : (b.style ?? null),
    instrumental: isVoice ? null : (b.instrumental ?? false),
    lyrics: isVoice ? null : (b.lyrics ?? null),
    webhook_url: b.webhook_url ?? null,
    webhook_secret: b.webhook_secret ?? null,
    credits,
    estimated_seconds: m.estimatedSeconds,
  }
}

// ---- Entry points --------------------------------------------------------------------------

/** POST /v1/generate/video (docs/api.md "Jobs"). Throws ApiError VALIDATION_ERROR or UNSUPPORTED_OPTION. */
export function validateVideo (body: unknown, opts: ValidateOptions = {}): NormalizedVideoRequest {
  checkModelKnown(body, 'video')
  return videoRules(schemaCheck(checkVideo, body, ''), opts)
}

/** POST /v1/generate/image (docs/api.md "Jobs"). */
export function validateImage (body: unknown, opts: ValidateOptions = {}): NormalizedImageRequest {
  checkModelKnown(body, 'image')
  return imageRules(schemaCheck(checkImage, body, ''), opts)
}

/** POST /v1/generate/audio (docs/api.md "Audio"). */
export function validateAudio (body: unknown, opts: ValidateOptions = {}): NormalizedAudioRequest {
  checkModelKnown(body, 'audio')
  return audioRules(schemaCheck(checkAudio, body, ''), opts)
}

/** POST /v1/extend/video (docs/api.md "Jobs"). The source job (caller's, completed, veo3) is checked by the caller. */
export function validateExtend (body: unknown, opts: ValidateOptions = {}): NormalizedExtendRequest {
  const b = schemaCheck(checkExtend, body, '')
  checkWebhook(b, opts)
  return {
    kind: 'extend',
    job_id: b.job_id,
    prompt: b.prompt,
    webhook_url: b.webhook_url ?? null,
    webhook_secret: b.webhook_secret ?? null,
    credits: priceExtend(),
    estimated_seconds: EXTEND.estimatedSeconds,
  }
}

/**
 * One POST /v1/batch item (docs/api.md "Batch (paid plans)"): a video or image request plus `type`. Issue paths
 * are prefixed with `/jobs/<index>` so they point into the whole batch body.
 */
export function validateBatchItem (item: unknown, index: number, opts: ValidateOptions = {}): NormalizedVideoRequest | NormalizedImageRequest {
  const at = `/jobs/${index}`
  if (!isObject(item)) {
    throw new ApiError('VALIDATION_ERROR', `${at} must be an object`, { details: [{ path: at, message: 'must be object' }] })
  }
  if (item.type === 'video') {
    checkModelKnown(item, 'video')
    return videoRules(schemaCheck(checkVideoItem, item, at), opts)
  }
  if (item.type === 'image') {
    checkModelKnown(item, 'image')
    return imageRules(schemaCheck(checkImageItem, item, at), opts)
  }
  const message = item.type === undefined ? 'is required' : 'must be one of: video, image'
  throw new ApiError('VALIDATION_ERROR', `${at}/type ${message}`, { details: [{ path: `${at}/type`, message }] })
}

/**
 * POST /v1/batch (docs/api.md "Batch (paid plans)"). A malformed envelope (not `{jobs: [1..10 items]}`) throws 400
 * VALIDATION_ERROR for the whole batch; otherwise every item is validated on its own and its
 * error, if any, is returned in its slot so the other items still run.
 */
export function validateBatch (body: unknown, opts: ValidateOptions = {}): BatchItemResult[] {
  const { jobs } = schemaCheck(checkBatchEnvelope, body, '')
  return jobs.map((item, index): BatchItemResult => {
    const type = isObject(item) && (item.type === 'video' || item.type === 'image') ? item.type : null
    try {
      const request = validateBatchItem(item, index, opts)
      return { index, type: request.kind, ok: true, request }
    } catch (e) {
      if (e instanceof ApiError) return { index, type, ok: false, error: e }
      throw e
    }
  })
}
