/**
 * TypeBox schemas of the generation requests (docs/api.md "Jobs") and of the responses the
 * catalogue and job routes document (docs/api.md "Jobs"). Plain schemas without `$id`,
 * so the OpenAPI builder can embed them as they are; validate.ts compiles the request schemas
 * with Ajv once. The schema layer checks types, lengths, enums, formats and array maxima only;
 * everything that depends on the model is a rule in validate.ts (422 UNSUPPORTED_OPTION).
 *
 * Unknown fields are rejected (`additionalProperties: false`): a misspelt option would
 * otherwise be dropped silently and the job priced and generated without it.
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox'
import { ApiError } from '../errors.js'
import {
  AUDIO_MODEL_IDS, IMAGE_ASPECT_RATIOS, IMAGE_MODEL_IDS, IMAGE_OUTPUT_FORMATS, IMAGE_RESOLUTIONS,
  LIP_SYNC_MODES, MAX_REFERENCE_AUDIO, MAX_REFERENCE_IMAGES, MAX_REFERENCE_VIDEOS,
  VIDEO_ASPECT_RATIOS, VIDEO_DURATIONS, VIDEO_MODEL_IDS, VIDEO_MODES, VIDEO_RESOLUTIONS,
} from './models.js'
import { MAX_URL_LENGTH } from './url.js'

/** `{type: string, enum: [...]}`: one error per bad value, and a plain enum in OpenAPI. */
function StringEnum<const T extends readonly string[]> (values: T, options: { description?: string } = {}) {
  return Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...options })
}

function Nullable<T extends TSchema> (schema: T) {
  return Type.Union([schema, Type.Null()])
}

/** An object whose values all follow `value` (`additionalProperties: value` in OpenAPI). */
function Dict<T extends TSchema> (value: T, description?: string) {
  return Type.Unsafe<Record<string, Static<T>>>({ type: 'object', additionalProperties: value, ...(description ? { description } : {}) })
}

const Uri = (description: string) => Type.String({ format: 'uri', maxLength: MAX_URL_LENGTH, description })
const UriList = (maxItems: number, description: string) =>
  Type.Array(Type.String({ format: 'uri', maxLength: MAX_URL_LENGTH }), { maxItems, description })
const AssetIds = (description: string) => Type.Array(Type.Integer({ minimum: 1 }), { maxItems: 3, description })
/** Items of multi_prompt and kling_elements: their contents are the provider's, not checked here. */
const OpaqueObject = Type.Object({}, { additionalProperties: true })

/** Canonical resolutions plus the upper-case spellings docs/api.md "Jobs" also accepts. */
const VIDEO_RESOLUTION_INPUTS = [...VIDEO_RESOLUTIONS, ...VIDEO_RESOLUTIONS.map(r => r.toUpperCase())]
const IMAGE_RESOLUTION_INPUTS = [...IMAGE_RESOLUTIONS, ...IMAGE_RESOLUTIONS.map(r => r.toLowerCase())]

const webhookProperties = {
  webhook_url: Type.Optional(Uri('Per-job webhook target: https and publicly routable')),
  webhook_secret: Type.Optional(Type.String({ minLength: 16, maxLength: 64, description: 'HMAC secret for the per-job webhook; requires webhook_url' })),
}

const videoProperties = {
  model: StringEnum(VIDEO_MODEL_IDS, { description: 'Video model id (GET /v1/models supported_model_ids.video)' }),
  prompt: Type.Optional(Type.String({ minLength: 1, maxLength: 20000, description: 'Each model has its own cap (GET /v1/models)' })),
  aspect_ratio: Type.Optional(StringEnum(VIDEO_ASPECT_RATIOS, { description: 'Per-model subset' })),
  duration: Type.Optional(StringEnum(VIDEO_DURATIONS, { description: 'Seconds, as a string; per-model subset; not for veo3' })),
  mode: Type.Optional(StringEnum(VIDEO_MODES, { description: 'grok-video: fun, normal, spicy; kling-3.0: std, pro' })),
  resolution: Type.Optional(StringEnum(VIDEO_RESOLUTION_INPUTS, { description: 'Per-model subset; upper-case spellings accepted; not for veo3 or kling-3.0' })),
  image_url: Type.Optional(Uri('Start image (first frame)')),
  first_frame_url: Type.Optional(Uri('Alias of image_url; wins when both are sent')),
  last_frame_url: Type.Optional(Uri('End frame; requires first_frame_url (or image_url)')),
  reference_image_urls: Type.Optional(UriList(MAX_REFERENCE_IMAGES, 'Per-model maximum; not together with frames')),
  reference_video_urls: Type.Optional(UriList(MAX_REFERENCE_VIDEOS, 'Per-model maximum; adds the model surcharge; not together with frames')),
  reference_audio_urls: Type.Optional(UriList(MAX_REFERENCE_AUDIO, 'Per-model maximum; not together with frames')),
  generate_audio: Type.Optional(Type.Boolean({ description: 'Default true for the models that accept it' })),
  sound: Type.Optional(Type.Boolean({ description: 'kling-3.0 only; default inferred from the prompt' })),
  multi_shots: Type.Optional(Type.Boolean({ description: 'kling-3.0 only' })),
  multi_prompt: Type.Optional(Type.Array(OpaqueObject, { maxItems: 5, description: 'kling-3.0 only' })),
  kling_elements: Type.Optional(Type.Array(OpaqueObject, { maxItems: 3, description: 'kling-3.0 only' })),
  audio_url: Type.Optional(Uri('lipsync: the speech to sync')),
  audio_duration: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 120, description: 'lipsync: seconds of audio (normal mode at most 15)' })),
  lip_sync_mode: Type.Optional(StringEnum(LIP_SYNC_MODES, { description: 'lipsync; default normal' })),
  character_asset_ids: Type.Optional(AssetIds('gemini-omni: character assets (GET /v1/assets)')),
  voice_asset_ids: Type.Optional(AssetIds('gemini-omni: voice assets (GET /v1/assets); required for gemini-omni')),
  ...webhookProperties,
}

/** POST /v1/generate/video body (docs/api.md "Jobs"). Only `model` is required by the schema. */
export const VideoRequest = Type.Object(videoProperties, { additionalProperties: false })
export type VideoRequestBody = Static<typeof VideoRequest>

const imageProperties = {
  model: StringEnum(IMAGE_MODEL_IDS, { description: 'Image model id (GET /v1/models supported_model_ids.image)' }),
  prompt: Type.Optional(Type.String({ minLength: 1, maxLength: 10000 })),
  aspect_ratio: Type.Optional(StringEnum(IMAGE_ASPECT_RATIOS)),
  resolution: Type.Optional(StringEnum(IMAGE_RESOLUTION_INPUTS, { description: 'Only for the models priced by resolution; lower-case accepted' })),
  output_format: Type.Optional(StringEnum(IMAGE_OUTPUT_FORMATS)),
  image_urls: Type.Optional(UriList(5, 'Source images; their presence switches to edit mode')),
  ...webhookProperties,
}

/** POST /v1/generate/image body (docs/api.md "Jobs"). */
export const ImageRequest = Type.Object(imageProperties, { additionalProperties: false })
export type ImageRequestBody = Static<typeof ImageRequest>

/** POST /v1/generate/audio body (docs/api.md "Audio"). */
export const AudioRequest = Type.Object({
  model: StringEnum(AUDIO_MODEL_IDS),
  text: Type.Optional(Type.String({ minLength: 1, maxLength: 5000, description: 'voiceover (required); priced at 15 characters per second' })),
  voice_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'voiceover (required)' })),
  voice_name: Type.Optional(Type.String({ maxLength: 100, description: 'voiceover' })),
  title: Type.Optional(Type.String({ minLength: 1, maxLength: 80, description: 'music' })),
  style: Type.Optional(Type.String({ minLength: 1, maxLength: 1000, description: 'music' })),
  instrumental: Type.Optional(Type.Boolean({ description: 'music' })),
  lyrics: Type.Optional(Type.String({ maxLength: 3000, description: 'music; required unless instrumental is true' })),
  ...webhookProperties,
}, { additionalProperties: false })
export type AudioRequestBody = Static<typeof AudioRequest>

/** POST /v1/extend/video body (docs/api.md "Jobs"). */
export const ExtendRequest = Type.Object({
  job_id: Type.String({ minLength: 1, description: 'A completed veo3-fast or veo3-quality job of the caller' }),
  prompt: Type.String({ minLength: 1, maxLength: 5000 }),
  ...webhookProperties,
}, { additionalProperties: false })
export type ExtendRequestBody = Static<typeof ExtendRequest>

/** A POST /v1/batch video item: the fields of docs/api.md "Jobs" plus `type: video`. */
export const VideoBatchItem = Type.Object({ type: Type.Literal('video'), ...videoProperties }, { additionalProperties: false })
/** A POST /v1/batch image item: the fields of docs/api.md "Jobs" plus `type: image`. */
export const ImageBatchItem = Type.Object({ type: Type.Literal('image'), ...imageProperties }, { additionalProperties: false })

/**
 * POST /v1/batch body (docs/api.md "Batch (paid plans)") as the OpenAPI document shows it: 1 to 10 items, each a
 * video or an image item. An item that is neither is not a 400 for the batch: it gets its own
 * 400 in its results slot and the others run, so the last branch accepts any value (a schema
 * stricter than the service would have validating proxies refuse batches the service takes).
 */
export const BatchRequest = Type.Object({
  jobs: Type.Array(Type.Union([
    VideoBatchItem,
    ImageBatchItem,
    Type.Unknown({ description: 'Any other value: answered in its own results slot (status 400, VALIDATION_ERROR); the other items still run' }),
  ]), { minItems: 1, maxItems: 10 }),
}, { additionalProperties: false })
export type BatchRequestBody = Static<typeof BatchRequest>

/**
 * The batch envelope alone: validate.ts checks it first (a failure is a 400 for the whole
 * batch), then each item on its own, so one bad item does not stop the others (docs/api.md "Batch (paid plans)").
 */
export const BatchEnvelope = Type.Object({
  jobs: Type.Array(Type.Unknown(), { minItems: 1, maxItems: 10 }),
}, { additionalProperties: false })

/** Idempotency-Key header (docs/api.md "Endpoints"): 1-200 characters of A-Z a-z 0-9 _ . - */
export const IDEMPOTENCY_KEY_PATTERN = '^[A-Za-z0-9_.-]{1,200}$'
const IDEMPOTENCY_KEY_RE = new RegExp(IDEMPOTENCY_KEY_PATTERN)

/**
 * Returns the key, undefined when the header is absent, or throws 400 INVALID_IDEMPOTENCY_KEY.
 * An empty header is malformed (it is present but has no characters).
 */
export function checkIdempotencyKey (value: string | undefined): string | undefined {
  if (value === undefined) return undefined
  if (!IDEMPOTENCY_KEY_RE.test(value)) throw new ApiError('INVALID_IDEMPOTENCY_KEY')
  return value
}

// ---- Responses ---------------------------------------------------------------------------

const JOB_STATUSES = ['queued', 'submitted', 'processing', 'completed', 'failed', 'cancelled'] as const
const JOB_TYPES = ['video', 'image', 'audio', 'extend'] as const
const DateTime = (description?: string) => Type.String({ format: 'date-time', ...(description ? { description } : {}) })

/** Job status (docs/api.md "Jobs"). */
export const JobStatus = StringEnum(JOB_STATUSES)

/** CreatedJob (docs/api.md "Jobs"): the answer to every job-creating request. */
export const CreatedJob = Type.Object({
  id: Type.String({ description: 'Job id, prefix job_' }),
  status: JobStatus,
  model: Type.String(),
  credits_charged: Type.Integer({ description: 'Refunded automatically if the provider fails the job' }),
  remaining_credits: Type.Optional(Type.Integer({ description: 'Balance after the charge' })),
  estimated_seconds: Type.Optional(Type.Integer({ description: 'Rough time to result' })),
  result_url: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: 'voiceover: the result, already complete in the 201' })),
  webhook_secret: Type.Optional(Type.String({ description: 'Generated for a per-job webhook_url sent without webhook_secret; returned only here' })),
  replayed: Type.Optional(Type.Literal(true, { description: 'Present only when an Idempotency-Key replay returned the original job' })),
})

/** Job (docs/api.md "Jobs" plus credits_refunded and estimated_seconds). */
export const Job = Type.Object({
  id: Type.String({ description: 'Job id, prefix job_' }),
  status: JobStatus,
  type: StringEnum(JOB_TYPES),
  model: Type.String(),
  prompt: Type.Optional(Type.String({ description: 'Absent for a job created without one (a frames-only video, lip sync, instrumental music)' })),
  progress: Type.Optional(Type.Integer({ minimum: 0, maximum: 100 })),
  credits_charged: Type.Optional(Type.Integer()),
  credits_refunded: Type.Optional(Type.Integer()),
  result_url: Type.Optional(Nullable(Type.String({ description: 'Hosted result once completed' }))),
  error_message: Type.Optional(Nullable(Type.String())),
  content_policy_violation: Type.Optional(Type.Boolean()),
  created_at: Type.Optional(DateTime()),
  updated_at: Type.Optional(DateTime()),
  completed_at: Type.Optional(Nullable(DateTime())),
  estimated_seconds: Type.Optional(Type.Integer()),
})

const Credits = Type.Integer({ minimum: 0 })
const CreditsGrid = Dict(Dict(Credits))

const LipSyncPricingSchema = Type.Object({
  billing: Type.String(),
  included_seconds: Type.Integer(),
  normal: Type.Object({ max_seconds: Type.Integer(), by_resolution: Dict(Type.Object({ base: Credits, per_second: Credits })) }),
  collate: Type.Object({ max_seconds: Type.Integer(), by_resolution: Dict(Type.Object({ base: Credits, per_second: Credits })) }),
  trim: Type.Object({ max_seconds: Type.Integer(), flat_by_resolution: Dict(Credits) }),
}, { description: 'lipsync: normal and collate cost base + per_second x (seconds - 5), trim is flat' })

/** The price descriptor fields of docs/api.md "Jobs"; each entry carries exactly one of the first six. */
const priceDescriptorProperties = {
  credits: Type.Optional(Credits),
  credits_by_resolution_and_duration: Type.Optional(CreditsGrid),
  credits_by_mode_and_duration: Type.Optional(CreditsGrid),
  credits_by_resolution: Type.Optional(Dict(Credits)),
  credits_by_duration: Type.Optional(Dict(Credits, 'voiceover: credits by the longest estimated spoken seconds of each band')),
  pricing: Type.Optional(LipSyncPricingSchema),
  reference_video_surcharge: Type.Optional(Dict(Credits, 'Added once per request that carries reference videos, by resolution')),
}

/** Values a model uses when the request omits the option (GET /v1/models `defaults`). */
export const CatalogDefaults = Type.Object({
  aspect_ratio: Type.Optional(Type.String()),
  duration: Type.Optional(Type.String({ description: 'Seconds, as a string' })),
  resolution: Type.Optional(Type.String()),
  mode: Type.Optional(Type.String()),
  lip_sync_mode: Type.Optional(Type.String()),
  edit_aspect_ratio: Type.Optional(Type.String({ description: 'Images: aspect ratio of an edit (image_urls sent)' })),
  output_format: Type.Optional(Type.String()),
}, { additionalProperties: false, description: 'Values used when the request omits the option' })

const Max = (description: string) => Type.Optional(Type.Integer({ minimum: 0, description }))
/**
 * What a model accepts (GET /v1/models `capabilities`), the rules validation applies: every key
 * a video, image or audio entry can carry (each kind carries its own subset).
 */
export const CatalogCapabilities = Type.Object({
  prompt_max_length: Max('Longest prompt in characters'),
  image_to_video: Type.Optional(Type.Boolean()),
  first_frame: Type.Optional(Type.Boolean({ description: 'Takes first_frame_url / image_url' })),
  last_frame: Type.Optional(Type.Boolean({ description: 'Takes last_frame_url' })),
  reference_images_max: Max('Most reference_image_urls'),
  reference_videos_max: Max('Most reference_video_urls'),
  reference_audio_max: Max('Most reference_audio_urls'),
  generate_audio: Type.Optional(StringEnum(['unsupported', 'optional', 'always'] as const)),
  extendable: Type.Optional(Type.Boolean({ description: 'POST /extend/video accepts its completed jobs' })),
  frames_force_adaptive: Type.Optional(Type.Boolean()),
  adaptive_requires_visual_input: Type.Optional(Type.Boolean()),
  max_duration_with_reference_video: Max('Longest duration (seconds) when reference videos are sent'),
  sound: Type.Optional(Type.Boolean()),
  multi_shots: Type.Optional(Type.Boolean()),
  multi_prompt_max: Max('Most multi_prompt items'),
  kling_elements_max: Max('Most kling_elements items'),
  character_assets_max: Max('Most character_asset_ids'),
  voice_assets_max: Max('Most voice_asset_ids'),
  requires: Type.Optional(Type.Array(Type.String(), { description: 'Fields this model needs (400 VALIDATION_ERROR when missing)' })),
  lip_sync_modes: Type.Optional(Type.Array(Type.String())),
  max_audio_seconds: Type.Optional(Dict(Type.Integer(), 'lipsync: longest audio_duration by lip_sync_mode')),
  edit: Type.Optional(Type.Boolean({ description: 'Images: image_urls switches to edit mode' })),
  image_urls_max: Max('Most image_urls'),
  output_formats: Type.Optional(Type.Array(Type.String())),
  characters_per_second: Type.Optional(Type.Number({ description: 'voiceover: spoken-duration estimate' })),
  max_seconds: Max('voiceover: longest estimated spoken duration'),
  max_characters: Max('voiceover: longest text'),
}, { additionalProperties: false })

/** Model catalogue entry (docs/api.md "Jobs"). */
export const CatalogEntry = Type.Object({
  id: Type.String(),
  name: Type.String(),
  provider: Type.String(),
  ...priceDescriptorProperties,
  features: Type.Array(Type.String()),
  modes: Type.Optional(Type.Array(Type.String())),
  durations: Type.Optional(Type.Array(Type.String())),
  resolutions: Type.Optional(Type.Array(Type.String())),
  aspect_ratios: Type.Optional(Type.Array(Type.String())),
  status: Type.Literal('available'),
  note: Type.Optional(Type.String()),
  estimated_seconds: Type.Integer(),
  defaults: Type.Optional(CatalogDefaults),
  capabilities: CatalogCapabilities,
})

const ExtendInfo = Type.Object({
  models: Type.Array(Type.String()),
  credits: Credits,
  description: Type.String(),
  estimated_seconds: Type.Optional(Type.Integer()),
})

/** GET /v1/models (docs/api.md "Jobs"). */
export const ModelsResponse = Type.Object({
  version: Type.String({ description: 'Pricing snapshot version; changes whenever a price changes' }),
  video: Type.Array(CatalogEntry),
  image: Type.Array(CatalogEntry),
  audio: Type.Array(CatalogEntry),
  extend: ExtendInfo,
  supported_model_ids: Type.Object({
    video: Type.Array(Type.String()),
    image: Type.Array(Type.String()),
    audio: Type.Array(Type.String()),
  }),
})

const PriceEntry = Type.Object({ name: Type.String(), ...priceDescriptorProperties, defaults: Type.Optional(CatalogDefaults) })

/** GET /v1/credits/pricing: every model's price descriptor by id, extend, and the credit packs. */
export const PricingResponse = Type.Object({
  version: Type.String({ description: 'Same pricing snapshot version as GET /v1/models' }),
  unit: Type.Literal('credits'),
  video: Dict(PriceEntry, 'By video model id'),
  image: Dict(PriceEntry, 'By image model id'),
  audio: Dict(PriceEntry, 'By audio model id'),
  extend: ExtendInfo,
  credit_packs: Type.Array(Type.Object({
    currency: StringEnum(['USD', 'INR'] as const),
    credits: Type.Integer(),
    amount: Type.Number({ description: 'Price in the major unit of the currency' }),
  }), { description: 'Credit packs bought on the web; the first purchase upgrades keys to pro' }),
  free_trial: Type.Object({
    credits: Type.Integer({ description: 'Free credits granted to a new account' }),
    videos: Type.Integer({ description: 'Videos an account may create before its first purchase' }),
  }),
})
