/**
 * The routing file of the provider scenarios: nano-banana on fal (the contract stub), every
 * other model on the simulated provider; optionally a request budget for fal
 * (docs/providers.md "Capacity and budgets").
 */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { FalStubProcess } from './children.js'

/** Writes the routing file; answers the service env that points nano-banana at the stub. */
export function falRoutesEnv (fal: FalStubProcess, o: { requestsPerSecond?: number; allow?: string[] } = {}): Record<string, string> {
  const file = join(mkdtempSync(join(tmpdir(), 'bench-routes-')), 'providers.json')
  const doc: Record<string, unknown> = { routes: { 'nano-banana': [{ provider: 'fal', model: 'fal-ai/nano-banana', input: { prompt: '$.prompt' } }] } }
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
