/**
 * Prices in integer credits for every model and option (docs/api.md "Jobs"). Pure
 * lookups over models.ts. Omitted options take the model's defaults (models.ts `defaults`), so
 * `priceVideo({ model })` is the price of a request that sent only the model. A combination the
 * catalogue has no price for throws 422 UNSUPPORTED_OPTION naming the field; validate.ts rejects
 * those earlier with the same code, so the throw is a guard, not the main path.
 */
import { ApiError } from '../errors.js'
import {
  audioModel, EXTEND, imageModel, videoModel,
  type LipSyncMode, type LipSyncPricing, type VideoModel,
} from './models.js'

/** Where a client learns what credits cost (the 402 and upgrade answers point there). */
export const PRICING_URL = '/v1/credits/pricing'

/** The request fields a video price depends on (the names of a normalised video request). */
export interface VideoPriceInput {
  model: string
  duration?: string | null
  /** Lower- or upper-case (`720p` / `720P`). */
  resolution?: string | null
  mode?: string | null
  /** Any non-empty list adds the model's reference-video surcharge once. */
  reference_video_urls?: readonly string[] | null
  lip_sync_mode?: LipSyncMode | null
  /** lipsync: length of the audio in seconds. */
  audio_duration?: number | null
}

/** The request fields an image price depends on. */
export interface ImagePriceInput {
  model: string
  /** `1K`/`2K`/`4K`, either case; ignored by flat-priced models. */
  resolution?: string | null
}

/** The request fields an audio price depends on. */
export interface AudioPriceInput {
  model: string
  /** voiceover: the text to speak. */
  text?: string | null
}

function unsupported (param: string, message: string): ApiError {
  return new ApiError('UNSUPPORTED_OPTION', message, { param })
}

/** Characters as users count them (code points), the same count as the schema's maxLength. */
export function characterCount (s: string): number {
  let n = 0
  for (const _ of s) n++
  return n
}

function knownVideo (id: string): VideoModel {
  const m = videoModel(id)
  if (!m) throw unsupported('model', `Unknown video model ${JSON.stringify(id)}`)
  return m
}

/**
 * Seconds a lip-sync job is billed for: audio_duration rounded up to a whole second, at least
 * the 5 seconds included in the base price (docs/api.md "Jobs": base + perSecond x (seconds - 5)).
 */
export function lipsyncBilledSeconds (audioDuration: number, includedSeconds = 5): number {
  return Math.max(includedSeconds, Math.ceil(audioDuration))
}

function priceLipsync (p: LipSyncPricing, resolution: string, mode: LipSyncMode, audioDuration: number | null | undefined): number {
  if (!(resolution in p.perResolution)) throw unsupported('resolution', `lipsync does not support resolution ${resolution}`)
  if (mode === 'trim') return p.trimFlat[resolution]
  if (audioDuration === null || audioDuration === undefined) throw unsupported('audio_duration', 'lipsync needs audio_duration')
  if (!(audioDuration > 0) || audioDuration > p.maxSeconds[mode]) {
    throw unsupported('audio_duration', `lipsync ${mode} mode takes audio_duration up to ${p.maxSeconds[mode]} seconds`)
  }
  const { base, perSecond } = p.perResolution[resolution]
  return base + perSecond * (lipsyncBilledSeconds(audioDuration, p.includedSeconds) - p.includedSeconds)
}

/** Credits for a video request (docs/api.md "Jobs"), surcharge for reference videos included. */
export function priceVideo (req: VideoPriceInput): number {
  const m = knownVideo(req.model)
  const d = m.defaults
  const resolution = (req.resolution ?? d.resolution ?? '').toLowerCase()
  const duration = req.duration ?? d.duration ?? ''
  const p = m.price
  let credits: number
  switch (p.kind) {
    case 'flat':
      credits = p.credits
      break
    case 'resolution_duration': {
      const row = Object.hasOwn(p.credits, resolution) ? p.credits[resolution] : undefined
      if (!row) throw unsupported('resolution', `${m.id} does not support resolution ${resolution}`)
      if (!Object.hasOwn(row, duration)) throw unsupported('duration', `${m.id} does not support duration ${duration}`)
      credits = row[duration]
      break
    }
    case 'mode_duration': {
      const mode = req.mode ?? d.mode ?? ''
      const row = Object.hasOwn(p.credits, mode) ? p.credits[mode] : undefined
      if (!row) throw unsupported('mode', `${m.id} does not support mode ${mode}`)
      if (!Object.hasOwn(row, duration)) throw unsupported('duration', `${m.id} does not support duration ${duration}`)
      credits = row[duration]
      break
    }
    case 'lipsync':
      credits = priceLipsync(p.pricing, resolution, req.lip_sync_mode ?? d.lip_sync_mode ?? 'normal', req.audio_duration)
      break
  }
  // Once per request, whatever the number of videos; gemini-omni takes one and lists no surcharge.
  const s = m.referenceVideoSurcharge
  if (s && req.reference_video_urls && req.reference_video_urls.length > 0) {
    if (!Object.hasOwn(s, resolution)) throw unsupported('resolution', `${m.id} does not support resolution ${resolution}`)
    credits += s[resolution]
  }
  return credits
}

/** Credits for an image request (docs/api.md "Jobs"); grok-image is one flat price per batch. */
export function priceImage (req: ImagePriceInput): number {
  const m = imageModel(req.model)
  if (!m) throw unsupported('model', `Unknown image model ${JSON.stringify(req.model)}`)
  if (m.price.kind === 'flat') return m.price.credits
  const resolution = (req.resolution ?? m.resolutions[0]).toUpperCase()
  if (!Object.hasOwn(m.price.credits, resolution)) throw unsupported('resolution', `${m.id} does not support resolution ${resolution}`)
  return m.price.credits[resolution as keyof typeof m.price.credits]
}

/** Estimated spoken seconds of a voiceover text: characters / 15, rounded up (docs/api.md "Audio"). */
export function spokenSeconds (text: string, charactersPerSecond = 15): number {
  return Math.ceil(characterCount(text) / charactersPerSecond)
}

/** Credits for an audio request (docs/api.md "Audio"). A voiceover estimated over 300 s is 422 (param text). */
export function priceAudio (req: AudioPriceInput): number {
  const m = audioModel(req.model)
  if (!m) throw unsupported('model', `Unknown audio model ${JSON.stringify(req.model)}`)
  if (m.price.kind === 'flat') return m.price.credits
  const seconds = spokenSeconds(req.text ?? '', m.price.charactersPerSecond)
  for (const band of m.price.bands) if (seconds <= band.maxSeconds) return band.credits
  const max = m.price.bands[m.price.bands.length - 1].maxSeconds
  throw unsupported('text', `voiceover text is estimated at ${seconds} seconds of speech (15 characters per second); the limit is ${max} seconds`)
}

/** Credits for POST /extend/video (docs/api.md "Jobs"): flat. */
export function priceExtend (): number {
  return EXTEND.credits
}
