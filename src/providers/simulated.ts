import { randomBytes } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import type { Storage } from '../storage/storage.js'
import { ProviderRefused, type Provider, type ProviderJob, type ProviderStatus } from './provider.js'

/**
 * The simulated provider (DESIGN.md section 5), the default. Timing follows the catalogue's
 * estimated_seconds divided by SIM_SPEED. Its job id encodes the submission time, duration and
 * directives, so status answers are a pure function of (id, now) and survive a restart.
 * Results are real small media files written through storage: MP4 for video, PNG or JPEG for
 * images (output_format), MP3 for audio.
 *
 * Prompt directives: [sim:fail] [sim:policy] [sim:reject] [sim:queue] [sim:timeout].
 */
export const DIRECTIVES = ['fail', 'policy', 'reject', 'queue', 'timeout'] as const
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

export class SimulatedProvider implements Provider {
  readonly name = 'simulated'
  constructor (private readonly storage: Storage, private readonly simSpeed: number) {}

  hasCapacity (job: ProviderJob): boolean {
    return !directivesOf(job.text).has('queue')
  }

  durationMs (job: ProviderJob): number {
    // voiceover completes synchronously (SPEC.md 4.5): no processing time.
    if (job.model === 'voiceover') return 0
    return Math.max(1, Math.round(job.estimatedSeconds * 1000 / this.simSpeed))
  }

  async submit (job: ProviderJob): Promise<{ providerJobId: string }> {
    const d = directivesOf(job.text)
    if (d.has('reject')) throw new ProviderRefused('Simulated provider refused the submission ([sim:reject])')
    if (d.has('timeout')) return new Promise(() => {}) // never answers
    const flags = (d.has('fail') ? 'f' : '') + (d.has('policy') ? 'p' : '') || 'n'
    return { providerJobId: `sim_${Date.now().toString(36)}_${this.durationMs(job).toString(36)}_${flags}_${randomBytes(4).toString('hex')}` }
  }

  async status (providerJobId: string, job: ProviderJob): Promise<ProviderStatus> {
    const [, at, dur, flags] = providerJobId.split('_')
    const started = parseInt(at, 36)
    const duration = parseInt(dur, 36)
    const elapsed = Date.now() - started
    if (flags.includes('f') && elapsed >= duration / 2) return { state: 'failed', progress: 50, error: 'The provider failed to generate this job (simulated [sim:fail])' }
    if (flags.includes('p') && elapsed >= duration / 2) return { state: 'failed', progress: 50, error: 'The provider flagged the output as violating its content policy', policyViolation: true }
    if (elapsed < duration) {
      if (elapsed < duration * 0.05) return { state: 'queued', progress: 0 }
      return { state: 'processing', progress: Math.min(99, Math.max(1, Math.floor(elapsed / duration * 100))) }
    }
    const file = resultFileOf(job)
    const key = `results/${job.id}.${file.ext}`
    // Written once; a restart or a repeated poll finds it in place.
    if (!(await this.storage.head(key))) await this.storage.put(key, await asset(file.name), file.contentType)
    return { state: 'completed', progress: 100, resultUrl: this.storage.url(key) }
  }

  async cancel (): Promise<void> {}
}
