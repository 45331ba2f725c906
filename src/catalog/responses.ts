/**
 * The two public catalogue bodies, built once from models.ts and frozen: GET /v1/models
 * (docs/api.md "Jobs") and GET /v1/credits/pricing (docs/api.md "Jobs"). Each has a strong ETag
 * computed here, so the front end serves them from its cache and answers If-None-Match with 304.
 * `version` is a hash of the price data: it changes exactly when a price (or pack) changes.
 */
import { createHash } from 'node:crypto'
import {
  AUDIO_MODELS, CREDIT_PACKS, EXTEND, FREE_TRIAL, IMAGE_MODELS, LIP_SYNC_MODES, VIDEO_MODELS,
  type AudioModel, type ImageModel, type VideoModel, type VideoPrice,
} from './models.js'

type Json = Record<string, unknown>

/** docs/api.md "Jobs" price descriptor of a video model: exactly one of the descriptor fields. */
function videoPriceDescriptor (p: VideoPrice): Json {
  switch (p.kind) {
    case 'flat': return { credits: p.credits }
    case 'resolution_duration': return { credits_by_resolution_and_duration: p.credits }
    case 'mode_duration': return { credits_by_mode_and_duration: p.credits }
    case 'lipsync': {
      const byResolution: Json = {}
      for (const [r, v] of Object.entries(p.pricing.perResolution)) byResolution[r] = { base: v.base, per_second: v.perSecond }
      return {
        pricing: {
          billing: `normal and collate: base + per_second x (seconds - ${p.pricing.includedSeconds}), seconds = audio_duration rounded up, at least ${p.pricing.includedSeconds}; trim: flat`,
          included_seconds: p.pricing.includedSeconds,
          normal: { max_seconds: p.pricing.maxSeconds.normal, by_resolution: byResolution },
          collate: { max_seconds: p.pricing.maxSeconds.collate, by_resolution: byResolution },
          trim: { max_seconds: p.pricing.maxSeconds.trim, flat_by_resolution: p.pricing.trimFlat },
        },
      }
    }
  }
}

function imagePriceDescriptor (m: ImageModel): Json {
  return m.price.kind === 'flat' ? { credits: m.price.credits } : { credits_by_resolution: m.price.credits }
}

function audioPriceDescriptor (m: AudioModel): Json {
  if (m.price.kind === 'flat') return { credits: m.price.credits }
  const byDuration: Json = {}
  for (const b of m.price.bands) byDuration[String(b.maxSeconds)] = b.credits
  return { credits_by_duration: byDuration }
}

function definedOnly (o: Json): Json {
  const out: Json = {}
  for (const [k, v] of Object.entries(o)) if (v !== null && v !== undefined) out[k] = v
  return out
}

function videoFeatures (m: VideoModel): string[] {
  const f: string[] = []
  if (m.lipsync) f.push('lip-sync')
  else f.push('text-to-video')
  if (m.firstFrame && !m.lipsync) f.push('image-to-video')
  if (m.lastFrame) f.push('first-last-frame')
  if (m.maxReferenceImages) f.push('reference-images')
  if (m.maxReferenceVideos) f.push('reference-videos')
  if (m.maxReferenceAudio) f.push('reference-audio')
  if (m.generateAudio !== 'unsupported' || m.klingOptions) f.push('audio')
  if (m.klingOptions) f.push('multi-shot', 'elements')
  if (m.assets) f.push('characters', 'voices')
  if (m.extendable) f.push('extendable')
  return f
}

function videoCapabilities (m: VideoModel): Json {
  const c: Json = {
    prompt_max_length: m.promptCap,
    image_to_video: m.firstFrame && !m.lipsync,
    first_frame: m.firstFrame,
    last_frame: m.lastFrame,
    reference_images_max: m.maxReferenceImages,
    reference_videos_max: m.maxReferenceVideos,
    reference_audio_max: m.maxReferenceAudio,
    generate_audio: m.generateAudio,
    extendable: m.extendable,
  }
  if (m.framesForceAdaptive) c.frames_force_adaptive = true
  if (m.adaptiveNeedsVisualInput) c.adaptive_requires_visual_input = true
  if (m.maxDurationWithReferenceVideo) c.max_duration_with_reference_video = Number(m.maxDurationWithReferenceVideo)
  if (m.klingOptions) Object.assign(c, { sound: true, multi_shots: true, multi_prompt_max: 5, kling_elements_max: 3 })
  if (m.assets) {
    Object.assign(c, { character_assets_max: 3, voice_assets_max: 3, requires: ['voice_asset_ids', 'character_asset_ids or reference_image_urls'] })
  }
  if (m.lipsync && m.price.kind === 'lipsync') {
    Object.assign(c, {
      lip_sync_modes: [...LIP_SYNC_MODES],
      max_audio_seconds: { ...m.price.pricing.maxSeconds },
      requires: ['image_url', 'audio_url', 'audio_duration'],
    })
  }
  return c
}

function videoEntry (m: VideoModel): Json {
  return definedOnly({
    id: m.id,
    name: m.name,
    provider: m.provider,
    ...videoPriceDescriptor(m.price),
    reference_video_surcharge: m.referenceVideoSurcharge ?? undefined,
    features: videoFeatures(m),
    modes: m.modes.length ? m.modes : undefined,
    durations: m.durations.length ? m.durations : undefined,
    resolutions: m.resolutions.length ? m.resolutions : undefined,
    aspect_ratios: m.aspectRatios.length ? m.aspectRatios : undefined,
    status: 'available',
    note: m.note,
    estimated_seconds: m.estimatedSeconds,
    defaults: definedOnly({ ...m.defaults }),
    capabilities: videoCapabilities(m),
  })
}

function imageEntry (m: ImageModel): Json {
  return definedOnly({
    id: m.id,
    name: m.name,
    provider: m.provider,
    ...imagePriceDescriptor(m),
    features: ['text-to-image', 'image-edit'],
    resolutions: m.resolutions.length ? m.resolutions : undefined,
    aspect_ratios: m.aspectRatios,
    status: 'available',
    note: m.note,
    estimated_seconds: m.estimatedSeconds,
    defaults: definedOnly({ aspect_ratio: '1:1', edit_aspect_ratio: 'auto', resolution: m.resolutions[0], output_format: 'png' }),
    capabilities: {
      prompt_max_length: m.promptCap,
      edit: true,
      image_urls_max: m.maxImageUrls,
      output_formats: m.outputFormats,
    },
  })
}

function audioEntry (m: AudioModel): Json {
  const spoken = m.price.kind === 'spoken_duration' ? m.price : null
  return definedOnly({
    id: m.id,
    name: m.name,
    provider: m.provider,
    ...audioPriceDescriptor(m),
    features: spoken ? ['text-to-speech'] : ['music', 'lyrics', 'instrumental'],
    status: 'available',
    note: m.note,
    estimated_seconds: m.estimatedSeconds,
    capabilities: spoken
      ? { characters_per_second: spoken.charactersPerSecond, max_seconds: spoken.bands[spoken.bands.length - 1].maxSeconds, max_characters: 5000, requires: ['text', 'voice_id'] }
      : { requires: ['lyrics unless instrumental'] },
  })
}

function deepFreeze<T> (v: T): T {
  if (v !== null && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v)
    for (const k of Object.keys(v)) deepFreeze((v as Json)[k])
  }
  return v
}

/** JSON with object keys sorted, so a hash depends on the data and not on key order. */
export function stableStringify (v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stableStringify).join(',')}]`
  if (v !== null && typeof v === 'object') {
    const o = v as Json
    return `{${Object.keys(o).sort().filter(k => o[k] !== undefined).map(k => `${JSON.stringify(k)}:${stableStringify(o[k])}`).join(',')}}`
  }
  return JSON.stringify(v) ?? 'null'
}

/** Pricing snapshot version: a short hash of the price data (docs/decisions.md "Catalogue and validation"). */
export function pricingVersion (priceData: unknown): string {
  return createHash('sha256').update(stableStringify(priceData)).digest('hex').slice(0, 16)
}

/** Strong ETag of a body: the quoted SHA-256 of its JSON serialisation. */
export function etagOf (body: unknown): string {
  return `"${createHash('sha256').update(JSON.stringify(body)).digest('hex')}"`
}

function priceEntries<M extends { id: string; name: string }> (models: readonly M[], describe: (m: M) => Json, extra: (m: M) => Json = () => ({})): Json {
  const out: Json = {}
  for (const m of models) out[m.id] = definedOnly({ name: m.name, ...describe(m), ...extra(m) })
  return out
}

const extendInfo = {
  models: [...EXTEND.models],
  credits: EXTEND.credits,
  description: EXTEND.description,
  estimated_seconds: EXTEND.estimatedSeconds,
}

// Everything that is a price, without the version; the version is its hash.
const pricingData = {
  unit: 'credits' as const,
  video: priceEntries(VIDEO_MODELS, m => videoPriceDescriptor(m.price), m => ({
    reference_video_surcharge: m.referenceVideoSurcharge ?? undefined,
    defaults: definedOnly({ ...m.defaults }),
  })),
  image: priceEntries(IMAGE_MODELS, imagePriceDescriptor),
  audio: priceEntries(AUDIO_MODELS, audioPriceDescriptor),
  extend: extendInfo,
  credit_packs: CREDIT_PACKS.map(p => ({ ...p })),
  free_trial: { ...FREE_TRIAL },
}

/** Pricing snapshot version shared by GET /v1/models and GET /v1/credits/pricing. */
export const PRICING_VERSION = pricingVersion(pricingData)

/** GET /v1/credits/pricing body (frozen; returned by identity). */
export const pricingResponse = deepFreeze({ version: PRICING_VERSION, ...pricingData })
export const PRICING_ETAG = etagOf(pricingResponse)

/** GET /v1/models body (frozen; returned by identity). */
export const modelsResponse = deepFreeze({
  version: PRICING_VERSION,
  video: VIDEO_MODELS.map(videoEntry),
  image: IMAGE_MODELS.map(imageEntry),
  audio: AUDIO_MODELS.map(audioEntry),
  extend: { ...extendInfo, models: [...extendInfo.models] },
  supported_model_ids: {
    video: VIDEO_MODELS.map(m => m.id),
    image: IMAGE_MODELS.map(m => m.id),
    audio: AUDIO_MODELS.map(m => m.id),
  },
})
export const MODELS_ETAG = etagOf(modelsResponse)
