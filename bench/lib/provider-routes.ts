/**
 * The routing file of the provider scenarios: nano-banana on fal (the contract stub), every
 * other model on the simulated provider; optionally a request budget for fal
 * (docs/providers.md "Capacity and budgets") and seedance-2 (a video model whose catalogue
 * estimate is 350 s, src/catalog/models.ts) on fal's text-to-video endpoint, mapped as
 * config/providers.example.json maps it.
 */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { FalStubProcess } from './children.js'

/** The video model `video: true` routes to fal, and the body that creates one of its jobs (docs/api.md "Jobs"). */
export const FAL_VIDEO_MODEL = 'seedance-2'
const FAL_VIDEO_ROUTE = {
  provider: 'fal',
  model: 'bytedance/seedance-2.0/text-to-video',
  input: { prompt: '$.prompt', aspect_ratio: { from: '$.aspect_ratio', map: { adaptive: 'auto' } }, resolution: '$.resolution', duration: '$.duration', generate_audio: '$.generate_audio' },
}

/** Writes the routing file; answers the service env that points nano-banana (and with `video`, seedance-2) at the stub. */
export function falRoutesEnv (fal: FalStubProcess, o: { requestsPerSecond?: number; allow?: string[]; video?: boolean } = {}): Record<string, string> {
  const file = join(mkdtempSync(join(tmpdir(), 'bench-routes-')), 'providers.json')
  const routes: Record<string, unknown[]> = { 'nano-banana': [{ provider: 'fal', model: 'fal-ai/nano-banana', input: { prompt: '$.prompt' } }] }
  if (o.video) routes[FAL_VIDEO_MODEL] = [FAL_VIDEO_ROUTE]
  const doc: Record<string, unknown> = { routes }
  if (o.requestsPerSecond) doc.providers = { fal: { requests_per_second: o.requestsPerSecond } }
  writeFileSync(file, JSON.stringify(doc))
  return {
    PROVIDERS_FILE: file,
    FAL_KEY: fal.key,
    FAL_QUEUE_URL: fal.url,
    FAL_JWKS_URL: fal.jwksUrl,
    // A submission whose answer is late is looked up in fal's request list: the stub's.
    FAL_API_URL: fal.url,
    WEBHOOK_ALLOWLIST: [new URL(fal.url).host, ...(o.allow ?? [])].join(','),
  }
}
