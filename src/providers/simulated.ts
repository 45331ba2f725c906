import { createHash, randomBytes } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import type { Storage } from '../storage/storage.js'
import { MediaError, makeImage, makeVideo } from '../media/ffmpeg.js'
import { UpstreamRefused, type ProviderJob, type RouteProvider, type UpstreamHandle, type UpstreamRequest, type UpstreamState } from './provider.js'

/**
 * The simulated provider (docs/architecture.md "Providers and media"), the default. Timing follows the catalogue's
 * estimated_seconds divided by SIM_SPEED. Its job id encodes the submission time, duration and
 * directives, so status answers are a pure function of (id, now) and survive a restart.
 * Results are real small media files written through storage: MP4 for video, PNG or JPEG for
 * images (output_format), MP3 for audio; one file per distinct media, shared by the jobs
 * that produce it (result()).
 *
 * Prompt directives: [sim:fail] [sim:policy] [sim:reject] [sim:queue] [sim:timeout].
 */
export const DIRECTIVES = ['fail', 'policy', 'reject', 'queue', 'timeout'] as const

/** Simulated video sizes by aspect ratio (small: they are test media). `adaptive` follows 16:9. */
const VIDEO_SIZES: Record<string, [number, number]> = {
  '16:9': [640, 360], '9:16': [360, 640], '2:3': [360, 540], '3:2': [540, 360], '1:1': [480, 480],
  '4:3': [480, 360], '3:4': [360, 480], '21:9': [840, 360], adaptive: [640, 360],
}
const IMAGE_SIZES: Record<string, [number, number]> = {
  '16:9': [640, 360], '9:16': [360, 640], '2:3': [400, 600], '3:2': [600, 400], '1:1': [512, 512], auto: [512, 512],
}
export type Directive = typeof DIRECTIVES[number]

export function directivesOf (text: string): Set<Directive> {
  const out = new Set<Directive>()
  for (const d of DIRECTIVES) if (text.includes(`[sim:${d}]`)) out.add(d)
  return out
}

const ASSET_DIRS = ['../../../assets/sim/', '../../assets/sim/']
const assetCache = new Map<string, Buffer>()

async function asset (name: string): Promise<Buffer> {
  let b = assetCache.get(name)
  if (b) return b
  for (const dir of ASSET_DIRS) {
    try { b = await readFile(fileURLToPath(new URL(dir + name, import.meta.url))); break } catch {}
  }
  if (!b) throw new Error(`simulated provider asset ${name} missing`)
  assetCache.set(name, b)
  return b
}

/** The file a job's result is stored as. */
export function resultFileOf (job: ProviderJob): { name: string; ext: string; contentType: string } {
  if (job.type === 'image') {
    return job.request.output_format === 'jpeg'
      ? { name: 'sample.jpg', ext: 'jpg', contentType: 'image/jpeg' }
      : { name: 'sample.png', ext: 'png', contentType: 'image/png' }
  }
  if (job.type === 'audio') return { name: 'sample.mp3', ext: 'mp3', contentType: 'audio/mpeg' }
  return { name: 'sample.mp4', ext: 'mp4', contentType: 'video/mp4' }
}

export class SimulatedProvider implements RouteProvider {
  readonly name = 'simulated'
  readonly simulated = true
  /** Storage key of each generated media buffer (the buffers are cached, see media()). */
  private readonly keys = new WeakMap<Buffer, string>()
  /** Keys known to be stored (or being stored) by this process. */
  private readonly stored = new Map<string, Promise<void>>()
  /** Parsed handle ids (parsed()). */
  private readonly handles = new WeakMap<UpstreamHandle, { started: number; duration: number; flags: string } | null>()
  private prefix = randomBytes(4).toString('hex')
  private seq = 0
  constructor (private readonly storage: Storage, private readonly simSpeed: number) {}

  /** `[sim:queue]`: the provider has no capacity for this job, ever (it waits until cancelled). */
  accepts (job: ProviderJob): boolean {
    return !directivesOf(job.text).has('queue')
  }

  durationMs (job: ProviderJob): number {
    // voiceover completes synchronously (docs/api.md "Audio"): no processing time.
    if (job.model === 'voiceover') return 0
    return Math.max(1, Math.round(job.estimatedSeconds * 1000 / this.simSpeed))
  }

  async submit (req: UpstreamRequest, job: ProviderJob): Promise<UpstreamHandle> {
    const d = directivesOf(job.text)
    if (d.has('reject')) throw new UpstreamRefused('Simulated provider refused the submission ([sim:reject])')
    if (d.has('timeout')) return new Promise(() => {}) // never answers
    const flags = (d.has('fail') ? 'f' : '') + (d.has('policy') ? 'p' : '') || 'n'
    return { id: `sim_${Date.now().toString(36)}_${this.durationMs(job).toString(36)}_${flags}_${this.uniq()}`, model: req.model }
  }

  async status (handle: UpstreamHandle, job: ProviderJob): Promise<UpstreamState> {
    const h = this.parsed(handle)
    if (h === null) return { state: 'failed', reason: `Unknown simulated job ${handle.id}`, contentPolicy: false }
    const { started, duration, flags } = h
    const elapsed = Date.now() - started
    if (flags.includes('f') && elapsed >= duration / 2) return { state: 'failed', reason: 'The provider failed to generate this job (simulated [sim:fail])', contentPolicy: false }
    if (flags.includes('p') && elapsed >= duration / 2) return { state: 'failed', reason: 'The provider flagged the output as violating its content policy', contentPolicy: true }
    if (elapsed < duration) {
      if (elapsed < duration * 0.05) return { state: 'queued' }
      return { state: 'running', progress: Math.min(99, Math.max(1, Math.floor(elapsed / duration * 100))) }
    }
    return { state: 'succeeded', outputs: [await this.result(job)] }
  }

  /**
   * A finished job's result: the media its request asks for, stored once under a key named by
   * its content (`results/sim/<sha256>.<ext>`) and shared by every job with the same media,
   * as thumbnails are (src/providers/library-media.ts). The simulated media depend only on
   * (type, aspect ratio, duration, format), so writing a copy per job only cost a head, a
   * write, a hash and a rename per completion. Results of real providers are still
   * downloaded per job (src/providers/results.ts). Checked and written once per process per
   * key; a restart checks again (head) and finds it in place.
   */
  private async result (job: ProviderJob): Promise<string> {
    const file = resultFileOf(job)
    const bytes = await this.media(job, file.name)
    let key = this.keys.get(bytes)
    if (key === undefined) {
      key = `results/sim/${createHash('sha256').update(bytes).digest('hex').slice(0, 32)}.${file.ext}`
      this.keys.set(bytes, key)
    }
    let stored = this.stored.get(key)
    if (stored === undefined) {
      const k = key
      stored = (async () => { if (!(await this.storage.head(k))) await this.storage.put(k, bytes, file.contentType) })()
      this.stored.set(key, stored)
      // A failed write is not remembered: the next poll tries again.
      stored.catch(() => { if (this.stored.get(k) === stored) this.stored.delete(k) })
    }
    await stored
    return this.storage.url(key)
  }

  async cancel (): Promise<boolean> { return true }

  /** What a handle's id says (start, duration, flags), parsed once per handle object: a job is polled ~10 times. */
  private parsed (handle: UpstreamHandle): { started: number; duration: number; flags: string } | null {
    let h = this.handles.get(handle)
    if (h !== undefined) return h
    const [, at, dur, flags] = handle.id.split('_')
    const started = parseInt(at, 36)
    const duration = parseInt(dur, 36)
    h = !Number.isFinite(started) || !Number.isFinite(duration) || flags === undefined ? null : { started, duration, flags }
    this.handles.set(handle, h)
    return h
  }

  /** A unique tail for handles: a random per-process prefix and a counter (no random call per job). */
  private uniq (): string {
    if (++this.seq >= 0x7fffffff) { this.prefix = randomBytes(4).toString('hex'); this.seq = 0 }
    return this.prefix + this.seq.toString(36)
  }

  /**
   * The result follows the request: a video of the requested aspect ratio
   * and duration, an image of the requested aspect ratio and format (ffmpeg, cached by
   * parameters). Audio, and any ffmpeg failure, fall back to the bundled sample file.
   */
  private async media (job: ProviderJob, sample: string): Promise<Buffer> {
    try {
      if (job.type === 'video' || job.type === 'extend') {
        const [width, height] = VIDEO_SIZES[String(job.request.aspect_ratio ?? '16:9')] ?? VIDEO_SIZES['16:9']
        const seconds = Math.min(30, Math.max(1, Number(job.request.duration) || Number(job.request.audio_duration) || 8))
        return await makeVideo({ width, height, seconds })
      }
      if (job.type === 'image') {
        const [width, height] = IMAGE_SIZES[String(job.request.aspect_ratio ?? '1:1')] ?? IMAGE_SIZES['1:1']
        return await makeImage({ width, height, format: job.request.output_format === 'jpeg' ? 'jpeg' : 'png' })
      }
    } catch (err) {
      if (!(err instanceof MediaError)) throw err
    }
    return asset(sample)
  }
}
