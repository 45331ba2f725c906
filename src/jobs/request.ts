/**
 * The public request that reproduces a job (the job page's "copy as curl / JavaScript /
 * Python", docs/dashboard.md): built from the normalised request stored with the job
 * (src/catalog/validate.ts), so it carries the defaults the service filled in. Internal fields
 * (price, estimate, kind, derived image mode) are dropped, and so is `webhook_secret`: a
 * secret is never shown back; resent with `webhook_url` only, the service generates one.
 */
import type { JobType } from './view.js'

/** Method, path and JSON body of the creation request. */
export interface JobRequest { method: 'POST'; path: string; body: Record<string, unknown> }

const PATHS: Record<JobType, string> = {
  video: '/v1/generate/video',
  image: '/v1/generate/image',
  audio: '/v1/generate/audio',
  extend: '/v1/extend/video',
}

/** Fields of the stored request that are not request fields of any creation route. */
const INTERNAL = new Set(['kind', 'credits', 'estimated_seconds', 'spoken_seconds', 'webhook_secret'])

export function jobRequest (type: JobType, stored: Record<string, unknown> | null): JobRequest {
  const body: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(stored ?? {})) {
    if (INTERNAL.has(k) || v === null || v === undefined) continue
    if (Array.isArray(v) && v.length === 0) continue
    // Derived, not request fields: an image's `mode` (edit when image_urls is set) and an
    // audio job's `prompt` (its text or style).
    if ((type === 'image' && k === 'mode') || (type === 'audio' && k === 'prompt')) continue
    body[k] = v
  }
  return { method: 'POST', path: PATHS[type], body }
}
