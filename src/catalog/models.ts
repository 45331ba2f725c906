/**
 * The model catalogue: every model the API sells, its options and its prices, as the product
 * spec prices them (GET /v1/models and GET /v1/credits/pricing show them; docs/api.md "Jobs"). Data only; the
 * rules that read it live in pricing.ts and validate.ts, the public shapes in responses.ts.
 * The catalogue governs acceptance (docs/decisions.md "Catalogue and validation"): an id listed here is accepted even
 * where the product spec's request-schema enum omits it.
 */

/** Video model ids, in catalogue order (docs/api.md "Jobs"; `supported_model_ids.video`). */
export const VIDEO_MODEL_IDS = [
  'veo3-fast', 'veo3-quality', 'grok-video', 'kling-3.0', 'seedance-2-fast', 'seedance-2',
  'seedance-2-mini', 'seedance-2.5', 'wan-3.0', 'wan-3.0-prime', 'minimax-h3',
  'seedance-1.5-pro', 'seedance-v1-pro', 'gemini-omni', 'lipsync',
] as const
export type VideoModelId = typeof VIDEO_MODEL_IDS[number]

/**
 * The 12 ids of the product spec's request-schema enum. Kept for reference and tests only:
 * acceptance and the OpenAPI enum use VIDEO_MODEL_IDS (all 15).
 */
export const SPEC_SCHEMA_VIDEO_MODEL_IDS: readonly VideoModelId[] = VIDEO_MODEL_IDS.filter(
  id => id !== 'wan-3.0' && id !== 'wan-3.0-prime' && id !== 'minimax-h3')

/** Image model ids (docs/api.md "Jobs"; `supported_model_ids.image`). */
export const IMAGE_MODEL_IDS = [
  'nano-banana', 'nano-banana-pro', 'nano-banana-2.1', 'grok-image', 'gpt-image-2', 'gpt-image-2.5',
] as const
export type ImageModelId = typeof IMAGE_MODEL_IDS[number]

/** Audio model ids (docs/api.md "Audio"; `supported_model_ids.audio`). */
export const AUDIO_MODEL_IDS = ['voiceover', 'music'] as const
export type AudioModelId = typeof AUDIO_MODEL_IDS[number]

/** Video aspect ratios a request may name (docs/api.md "Jobs"). */
export const VIDEO_ASPECT_RATIOS = ['16:9', '9:16', '2:3', '3:2', '1:1', '4:3', '3:4', '21:9', 'adaptive'] as const
export type VideoAspectRatio = typeof VIDEO_ASPECT_RATIOS[number]

/** Durations in seconds, sent as strings (docs/api.md "Jobs"). */
export const VIDEO_DURATIONS = ['4', '5', '6', '8', '10', '12', '15', '20', '30'] as const
export type VideoDuration = typeof VIDEO_DURATIONS[number]

/** Canonical (lower-case) video resolutions; `768p` and `2k` exist for minimax-h3 only. */
export const VIDEO_RESOLUTIONS = ['480p', '720p', '768p', '1080p', '2k', '4k'] as const
export type VideoResolution = typeof VIDEO_RESOLUTIONS[number]

/** Generation modes (grok-video: fun/normal/spicy; kling-3.0: std/pro). */
export const VIDEO_MODES = ['std', 'pro', 'fun', 'normal', 'spicy'] as const
export type VideoMode = typeof VIDEO_MODES[number]

/** Lip-sync modes (docs/api.md "Jobs", lipsync row). */
export const LIP_SYNC_MODES = ['normal', 'trim', 'collate'] as const
export type LipSyncMode = typeof LIP_SYNC_MODES[number]

/** Image aspect ratios, canonical resolutions and formats (docs/api.md "Jobs"). */
export const IMAGE_ASPECT_RATIOS = ['16:9', '9:16', '2:3', '3:2', '1:1', 'auto'] as const
export type ImageAspectRatio = typeof IMAGE_ASPECT_RATIOS[number]
export const IMAGE_RESOLUTIONS = ['1K', '2K', '4K'] as const
export type ImageResolution = typeof IMAGE_RESOLUTIONS[number]
export const IMAGE_OUTPUT_FORMATS = ['png', 'jpeg'] as const
export type ImageOutputFormat = typeof IMAGE_OUTPUT_FORMATS[number]

/** Largest reference-media counts any model allows (wan-3.0: 10 images, 5 videos, 5 audio). */
export const MAX_REFERENCE_IMAGES = 10
export const MAX_REFERENCE_VIDEOS = 5
export const MAX_REFERENCE_AUDIO = 5

/** Lip-sync pricing (docs/api.md "Jobs"): base + perSecond x (seconds - 5) for normal and collate. */
export interface LipSyncPricing {
  /** Seconds included in `base`; shorter audio is billed as this many seconds. */
  includedSeconds: number
  /** Per resolution: base credits and credits per second beyond `includedSeconds`. */
  perResolution: Readonly<Record<string, { base: number; perSecond: number }>>
  /** trim: flat credits per resolution. */
  trimFlat: Readonly<Record<string, number>>
  /** Longest audio_duration per mode, in seconds. */
  maxSeconds: Readonly<Record<LipSyncMode, number>>
}

/** How a video model is priced; exactly one per model (docs/api.md "Jobs", Models and prices). */
export type VideoPrice =
  | { kind: 'flat'; credits: number }
  /** credits[resolution][duration] */
  | { kind: 'resolution_duration'; credits: Readonly<Record<string, Readonly<Record<string, number>>>> }
  /** credits[mode][duration] */
  | { kind: 'mode_duration'; credits: Readonly<Record<string, Readonly<Record<string, number>>>> }
  | { kind: 'lipsync'; pricing: LipSyncPricing }

/** Whether a model takes `generate_audio`: optional (default true), always on, or not at all. */
export type AudioSupport = 'optional' | 'always' | 'unsupported'

/** Defaults applied when a request omits an option (docs/decisions.md, "Catalogue and validation"). */
export interface VideoDefaults {
  aspect_ratio: VideoAspectRatio | null
  duration: VideoDuration | null
  resolution: VideoResolution | null
  mode: VideoMode | null
  lip_sync_mode: LipSyncMode | null
}

/** One video model of docs/api.md "Jobs". Empty option lists mean "the model refuses the option" (422). */
export interface VideoModel {
  id: VideoModelId
  name: string
  /** Model vendor (catalogue `provider`); routing to an API provider is configuration. */
  provider: string
  aspectRatios: readonly VideoAspectRatio[]
  durations: readonly VideoDuration[]
  resolutions: readonly VideoResolution[]
  modes: readonly VideoMode[]
  defaults: VideoDefaults
  /** Longest prompt in characters (docs/api.md "Jobs"). */
  promptCap: number
  /** image_url / first_frame_url accepted. */
  firstFrame: boolean
  /** last_frame_url accepted. */
  lastFrame: boolean
  maxReferenceImages: number
  maxReferenceVideos: number
  maxReferenceAudio: number
  generateAudio: AudioSupport
  /** kling-3.0 only: sound, multi_shots, multi_prompt (max 5), kling_elements (max 3). */
  klingOptions: boolean
  /** gemini-omni only: character_asset_ids / voice_asset_ids (max 3 each). */
  assets: boolean
  /** A first or last frame forces aspect_ratio `adaptive` (seedance-2.5, wan-3.0, wan-3.0-prime). */
  framesForceAdaptive: boolean
  /** `adaptive` needs a frame or visual reference media (minimax-h3). */
  adaptiveNeedsVisualInput: boolean
  /** Longest duration allowed when reference videos are sent (wan: 15 s), else null. */
  maxDurationWithReferenceVideo: VideoDuration | null
  /** lipsync: image_url + audio_url + audio_duration, lip_sync_mode. */
  lipsync: boolean
  /** Source of POST /extend/video (docs/api.md "Jobs"). */
  extendable: boolean
  /** Catalogue estimated_seconds (docs/api.md "Jobs"). */
  estimatedSeconds: number
  price: VideoPrice
  /** Credits added once per request that carries reference videos, by resolution. */
  referenceVideoSurcharge: Readonly<Record<string, number>> | null
  note?: string
}

/** Freezes catalogue data so no importer can change a price by accident. */
function deepFreeze<T> (v: T): T {
  if (v !== null && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v)
    for (const k of Object.keys(v)) deepFreeze((v as Record<string, unknown>)[k])
  }
  return v
}

/** Builds credits[row][duration] from price rows written as "480p: 220/350/500". */
function grid (durations: readonly string[], rows: Record<string, readonly number[]>): Record<string, Record<string, number>> {
  const out: Record<string, Record<string, number>> = {}
  for (const [row, values] of Object.entries(rows)) {
    if (values.length !== durations.length) throw new Error(`price row ${row}: ${values.length} values for ${durations.length} durations`)
    out[row] = {}
    durations.forEach((d, i) => { out[row][d] = values[i] })
  }
  return out
}

const WIDE5 = ['16:9', '9:16', '2:3', '3:2', '1:1'] as const
const SEEDANCE_NEW = ['16:9', '4:3', '1:1', '3:4', '9:16', '21:9', 'adaptive'] as const
const WAN_AR = ['16:9', '4:3', '1:1', '3:4', '9:16', 'adaptive'] as const
const D_6_10_15 = ['6', '10', '15'] as const
const D_6_TO_30 = ['6', '10', '15', '20', '30'] as const

type SharedKeys = 'aspectRatios' | 'durations' | 'resolutions' | 'modes' | 'promptCap' | 'firstFrame' |
  'lastFrame' | 'maxReferenceImages' | 'maxReferenceVideos' | 'maxReferenceAudio' | 'generateAudio' |
  'klingOptions' | 'assets' | 'framesForceAdaptive' | 'adaptiveNeedsVisualInput' |
  'maxDurationWithReferenceVideo' | 'lipsync' | 'extendable' | 'referenceVideoSurcharge'

/** Fields most models share; each entry below states what differs. */
const BASE: Pick<VideoModel, SharedKeys> = {
  aspectRatios: [],
  durations: [],
  resolutions: [],
  modes: [],
  promptCap: 20000,
  firstFrame: true,
  lastFrame: false,
  maxReferenceImages: 0,
  maxReferenceVideos: 0,
  maxReferenceAudio: 0,
  generateAudio: 'unsupported',
  klingOptions: false,
  assets: false,
  framesForceAdaptive: false,
  adaptiveNeedsVisualInput: false,
  maxDurationWithReferenceVideo: null,
  lipsync: false,
  extendable: false,
  referenceVideoSurcharge: null,
}

/**
 * Defaults: aspect ratio 16:9 (every model that takes a ratio lists it), and otherwise the
 * first, cheapest value of each list, so an omitted option never costs more than the minimum.
 */
function defaults (m: Pick<VideoModel, 'aspectRatios' | 'durations' | 'resolutions' | 'modes'>, over: Partial<VideoDefaults> = {}): VideoDefaults {
  return {
    aspect_ratio: m.aspectRatios.length ? '16:9' : null,
    duration: m.durations[0] ?? null,
    resolution: m.resolutions[0] ?? null,
    mode: m.modes[0] ?? null,
    lip_sync_mode: null,
    ...over,
  }
}

type VideoSpec = Omit<VideoModel, SharedKeys | 'defaults'> & Partial<Pick<VideoModel, SharedKeys>> & { defaults?: Partial<VideoDefaults> }

function video (m: VideoSpec): VideoModel {
  const full = { ...BASE, ...m }
  return { ...full, defaults: defaults(full, m.defaults) }
}

const seedanceRefs = { lastFrame: true, generateAudio: 'optional' as const, maxReferenceImages: 9, maxReferenceVideos: 3, maxReferenceAudio: 1 }
const wanCommon = {
  aspectRatios: WAN_AR, durations: D_6_TO_30, resolutions: ['480p', '720p', '1080p'] as const,
  lastFrame: true, generateAudio: 'optional' as const, maxReferenceImages: 10, maxReferenceVideos: 5, maxReferenceAudio: 5,
  framesForceAdaptive: true, maxDurationWithReferenceVideo: '15' as const, provider: 'alibaba',
}

/** The 15 video models of docs/api.md "Jobs", in catalogue order. */
export const VIDEO_MODELS: readonly VideoModel[] = deepFreeze([
  video({
    id: 'veo3-fast', name: 'Veo 3 Fast', provider: 'google', aspectRatios: ['16:9', '9:16'],
    promptCap: 10000, lastFrame: true, extendable: true, estimatedSeconds: 110,
    price: { kind: 'flat', credits: 120 },
    note: 'Fixed length of about 8 seconds: do not send duration or resolution. Extendable with POST /extend/video.',
  }),
  video({
    id: 'veo3-quality', name: 'Veo 3 Quality', provider: 'google', aspectRatios: ['16:9', '9:16'],
    promptCap: 10000, lastFrame: true, extendable: true, estimatedSeconds: 110,
    price: { kind: 'flat', credits: 320 },
    note: 'Fixed length of about 8 seconds: do not send duration or resolution. Extendable with POST /extend/video.',
  }),
  video({
    id: 'grok-video', name: 'Grok Video', provider: 'xai', aspectRatios: WIDE5, durations: D_6_TO_30,
    resolutions: ['480p', '720p'], modes: ['fun', 'normal', 'spicy'], defaults: { mode: 'normal' },
    promptCap: 5000, estimatedSeconds: 100,
    price: { kind: 'resolution_duration', credits: grid(D_6_TO_30, { '480p': [60, 90, 120, 140, 160], '720p': [80, 120, 150, 180, 280] }) },
  }),
  video({
    id: 'kling-3.0', name: 'Kling 3.0', provider: 'kuaishou', aspectRatios: WIDE5, durations: D_6_10_15,
    modes: ['std', 'pro'], promptCap: 2500, klingOptions: true, estimatedSeconds: 165,
    price: { kind: 'mode_duration', credits: grid(D_6_10_15, { std: [225, 300, 450], pro: [300, 450, 600] }) },
    note: 'sound defaults to what the prompt implies; send sound: false for a silent video.',
  }),
  video({
    id: 'seedance-2-fast', name: 'Seedance 2 Fast', provider: 'bytedance', aspectRatios: WIDE5, durations: D_6_10_15,
    resolutions: ['480p', '720p'], ...seedanceRefs, estimatedSeconds: 195,
    price: { kind: 'resolution_duration', credits: grid(D_6_10_15, { '480p': [150, 200, 300], '720p': [350, 500, 650] }) },
    referenceVideoSurcharge: { '480p': 50, '720p': 100 },
  }),
  video({
    id: 'seedance-2', name: 'Seedance 2', provider: 'bytedance', aspectRatios: WIDE5, durations: D_6_10_15,
    resolutions: ['480p', '720p', '1080p', '4k'], ...seedanceRefs, estimatedSeconds: 350,
    price: {
      kind: 'resolution_duration',
      credits: grid(D_6_10_15, { '480p': [220, 350, 500], '720p': [450, 600, 900], '1080p': [900, 1600, 2500], '4k': [2000, 3000, 5000] }),
    },
    referenceVideoSurcharge: { '480p': 100, '720p': 200, '1080p': 600, '4k': 1000 },
  }),
  video({
    id: 'seedance-2-mini', name: 'Seedance 2 Mini', provider: 'bytedance', aspectRatios: SEEDANCE_NEW, durations: D_6_10_15,
    resolutions: ['480p', '720p'], ...seedanceRefs, estimatedSeconds: 240,
    price: { kind: 'resolution_duration', credits: grid(D_6_10_15, { '480p': [50, 80, 120], '720p': [100, 150, 210] }) },
    referenceVideoSurcharge: { '480p': 20, '720p': 50 },
  }),
  video({
    id: 'seedance-2.5', name: 'Seedance 2.5', provider: 'bytedance', aspectRatios: SEEDANCE_NEW, durations: D_6_TO_30,
    resolutions: ['480p', '720p'], ...seedanceRefs, framesForceAdaptive: true, estimatedSeconds: 235,
    price: { kind: 'resolution_duration', credits: grid(D_6_TO_30, { '480p': [300, 400, 600, 750, 1000], '720p': [600, 800, 1600, 1800, 3000] }) },
    referenceVideoSurcharge: { '480p': 150, '720p': 350 },
    note: 'A first or last frame makes the aspect ratio adaptive (it follows the frame).',
  }),
  video({
    id: 'wan-3.0', name: 'Wan 3.0', ...wanCommon, estimatedSeconds: 270,
    price: {
      kind: 'resolution_duration',
      credits: grid(D_6_TO_30, { '480p': [80, 160, 240, 320, 480], '720p': [180, 320, 480, 640, 960], '1080p': [380, 640, 960, 1280, 1920] }),
    },
    referenceVideoSurcharge: { '480p': 240, '720p': 480, '1080p': 960 },
    note: 'A first or last frame makes the aspect ratio adaptive. With reference videos the duration is at most 15 seconds.',
  }),
  video({
    id: 'wan-3.0-prime', name: 'Wan 3.0 Prime', ...wanCommon, estimatedSeconds: 180,
    price: {
      kind: 'resolution_duration',
      credits: grid(D_6_TO_30, { '480p': [140, 240, 360, 480, 720], '720p': [300, 500, 740, 1000, 1500], '1080p': [600, 1000, 1500, 2000, 3020] }),
    },
    referenceVideoSurcharge: { '480p': 360, '720p': 740, '1080p': 1500 },
    note: 'Faster variant of wan-3.0. A first or last frame makes the aspect ratio adaptive. With reference videos the duration is at most 15 seconds.',
  }),
  video({
    id: 'minimax-h3', name: 'MiniMax H3', provider: 'minimax',
    aspectRatios: ['21:9', '16:9', '4:3', '1:1', '3:4', '9:16', 'adaptive'], durations: D_6_10_15,
    resolutions: ['768p', '2k'], promptCap: 7000, lastFrame: true, generateAudio: 'always',
    maxReferenceImages: 5, maxReferenceVideos: 3, maxReferenceAudio: 3, adaptiveNeedsVisualInput: true,
    estimatedSeconds: 150,
    price: { kind: 'resolution_duration', credits: grid(D_6_10_15, { '768p': [80, 160, 240], '2k': [140, 260, 380] }) },
    referenceVideoSurcharge: { '768p': 240, '2k': 380 },
    note: 'Sound is always on. aspect_ratio adaptive needs a first frame or reference images/videos. Reference videos total at most 15 seconds.',
  }),
  video({
    id: 'seedance-1.5-pro', name: 'Seedance 1.5 Pro', provider: 'bytedance', aspectRatios: WIDE5, durations: ['4', '8', '12'],
    resolutions: ['480p', '720p'], generateAudio: 'optional', estimatedSeconds: 130,
    price: { kind: 'resolution_duration', credits: grid(['4', '8', '12'], { '480p': [30, 60, 80], '720p': [60, 100, 150] }) },
  }),
  video({
    id: 'seedance-v1-pro', name: 'Seedance V1 Pro', provider: 'bytedance', aspectRatios: WIDE5, durations: ['5', '10'],
    resolutions: ['480p', '720p'], estimatedSeconds: 65,
    price: { kind: 'resolution_duration', credits: grid(['5', '10'], { '480p': [30, 50], '720p': [60, 100] }) },
  }),
  video({
    id: 'gemini-omni', name: 'Gemini Omni', provider: 'google', aspectRatios: ['16:9', '9:16'], durations: ['4', '6', '8', '10'],
    resolutions: ['1080p', '4k'], firstFrame: false, maxReferenceImages: 7, maxReferenceVideos: 1, assets: true,
    estimatedSeconds: 220,
    price: { kind: 'resolution_duration', credits: grid(['4', '6', '8', '10'], { '1080p': [120, 160, 200, 240], '4k': [250, 300, 350, 400] }) },
    note: 'Needs voice_asset_ids and a character (character_asset_ids or reference_image_urls); ids come from GET /v1/assets.',
  }),
  video({
    id: 'lipsync', name: 'Lip Sync', provider: 'genjobs', resolutions: ['480p', '720p'], promptCap: 5000,
    lipsync: true, defaults: { lip_sync_mode: 'normal' }, estimatedSeconds: 695,
    price: {
      kind: 'lipsync',
      pricing: {
        includedSeconds: 5,
        perResolution: { '480p': { base: 60, perSecond: 5 }, '720p': { base: 150, perSecond: 20 } },
        trimFlat: { '480p': 110, '720p': 300 },
        maxSeconds: { normal: 15, collate: 120, trim: 120 },
      },
    },
    note: 'Needs image_url, audio_url and audio_duration (seconds). Billed seconds are audio_duration rounded up, at least 5.',
  }),
])

/** How an image model is priced (docs/api.md "Jobs"). */
export type ImagePrice =
  | { kind: 'flat'; credits: number }
  | { kind: 'resolution'; credits: Readonly<Record<ImageResolution, number>> }

/** One image model of docs/api.md "Jobs". */
export interface ImageModel {
  id: ImageModelId
  name: string
  provider: string
  aspectRatios: readonly ImageAspectRatio[]
  /** Empty when the model is flat-priced and takes no resolution. */
  resolutions: readonly ImageResolution[]
  outputFormats: readonly ImageOutputFormat[]
  promptCap: number
  /** Most image_urls in edit mode. */
  maxImageUrls: number
  estimatedSeconds: number
  price: ImagePrice
  note?: string
}

function image (m: Pick<ImageModel, 'id' | 'name' | 'provider' | 'estimatedSeconds' | 'price'> & { note?: string }): ImageModel {
  return {
    aspectRatios: IMAGE_ASPECT_RATIOS,
    resolutions: m.price.kind === 'resolution' ? IMAGE_RESOLUTIONS : [],
    outputFormats: IMAGE_OUTPUT_FORMATS,
    promptCap: 10000,
    maxImageUrls: 5,
    ...m,
  }
}

/** The 6 image models of docs/api.md "Jobs". estimated_seconds are this service's estimates. */
export const IMAGE_MODELS: readonly ImageModel[] = deepFreeze([
  image({ id: 'nano-banana', name: 'Nano Banana', provider: 'google', estimatedSeconds: 15, price: { kind: 'flat', credits: 10 } }),
  image({ id: 'nano-banana-pro', name: 'Nano Banana Pro', provider: 'google', estimatedSeconds: 30, price: { kind: 'flat', credits: 30 } }),
  image({ id: 'nano-banana-2.1', name: 'Nano Banana 2.1', provider: 'google', estimatedSeconds: 20, price: { kind: 'resolution', credits: { '1K': 8, '2K': 12, '4K': 18 } } }),
  image({
    id: 'grok-image', name: 'Grok Image', provider: 'xai', estimatedSeconds: 15, price: { kind: 'flat', credits: 20 },
    note: 'One request returns a batch of images for a flat 20 credits.',
  }),
  image({ id: 'gpt-image-2', name: 'GPT Image 2', provider: 'openai', estimatedSeconds: 45, price: { kind: 'resolution', credits: { '1K': 10, '2K': 20, '4K': 30 } } }),
  image({ id: 'gpt-image-2.5', name: 'GPT Image 2.5', provider: 'openai', estimatedSeconds: 50, price: { kind: 'resolution', credits: { '1K': 10, '2K': 20, '4K': 40 } } }),
])

/** Voiceover bands: estimated seconds up to `maxSeconds` cost `credits` (docs/api.md "Audio"). */
export interface DurationBand { maxSeconds: number; credits: number }

/** One audio model of docs/api.md "Audio". */
export type AudioModel = {
  id: AudioModelId
  name: string
  provider: string
  estimatedSeconds: number
  note?: string
} & (
  | { price: { kind: 'flat'; credits: number } }
  | { price: { kind: 'spoken_duration'; charactersPerSecond: number; bands: readonly DurationBand[] } }
)

/** The 2 audio models of docs/api.md "Audio". */
export const AUDIO_MODELS: readonly AudioModel[] = deepFreeze([
  {
    id: 'voiceover', name: 'Voiceover', provider: 'genjobs', estimatedSeconds: 10,
    price: {
      kind: 'spoken_duration',
      charactersPerSecond: 15,
      bands: [
        { maxSeconds: 15, credits: 20 },
        { maxSeconds: 30, credits: 40 },
        { maxSeconds: 60, credits: 80 },
        { maxSeconds: 120, credits: 150 },
        { maxSeconds: 300, credits: 300 },
      ],
    },
    note: 'Priced by estimated spoken length: ceil(characters / 15) seconds; at most 300 seconds. Usually completes synchronously.',
  },
  {
    id: 'music', name: 'Music', provider: 'genjobs', estimatedSeconds: 90,
    price: { kind: 'flat', credits: 50 },
    note: 'lyrics are required unless instrumental is true.',
  },
])

/** POST /extend/video (docs/api.md "Jobs"; the `extend` object of GET /v1/credits/pricing). */
export const EXTEND = deepFreeze({
  models: ['veo3-fast', 'veo3-quality'] as readonly VideoModelId[],
  credits: 120,
  /** Same provider pipeline as a veo3 generation. */
  estimatedSeconds: 110,
  description: 'Extends a completed veo3-fast or veo3-quality video by about 7 seconds for a flat 120 credits.',
} as const)

/** Credit packs sold on the web (docs/api.md "Usage and limits"); `amount` is in the currency's major unit. */
export const CREDIT_PACKS: ReadonlyArray<{ currency: 'USD' | 'INR'; credits: number; amount: number }> = deepFreeze([
  { currency: 'USD', credits: 600, amount: 5 },
  { currency: 'USD', credits: 3000, amount: 19 },
  { currency: 'USD', credits: 9000, amount: 49 },
  { currency: 'USD', credits: 20000, amount: 99 },
  { currency: 'INR', credits: 400, amount: 299 },
  { currency: 'INR', credits: 3000, amount: 1999 },
  { currency: 'INR', credits: 20000, amount: 9999 },
])

/** Free trial (docs/api.md "Jobs"). */
export const FREE_TRIAL = { credits: 200, videos: 1 } as const

const videoById = new Map<string, VideoModel>(VIDEO_MODELS.map(m => [m.id, m]))
const imageById = new Map<string, ImageModel>(IMAGE_MODELS.map(m => [m.id, m]))
const audioById = new Map<string, AudioModel>(AUDIO_MODELS.map(m => [m.id, m]))

/** Lookups; undefined for ids the catalogue does not hold (own keys only, no prototype names). */
export function videoModel (id: string): VideoModel | undefined { return videoById.get(id) }
export function imageModel (id: string): ImageModel | undefined { return imageById.get(id) }
export function audioModel (id: string): AudioModel | undefined { return audioById.get(id) }

/** True for the video models POST /extend/video accepts as a source (docs/api.md "Jobs"). */
export function isExtendableModel (id: string): boolean {
  return videoById.get(id)?.extendable === true
}
