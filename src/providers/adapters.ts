import { FalAdapter } from './fal.js'
import { KieAdapter } from './kie.js'
import type { ProviderJob, RouteProvider } from './provider.js'
import { ReplicateAdapter } from './replicate.js'
import type { RawCallback, UpstreamAdapter, UpstreamHandle, UpstreamLookup, UpstreamRequest } from './upstream.js'

/**
 * Builds the real adapters (src/providers/{fal,replicate,kie}.ts, the upstream contract) from
 * the provider env (docs/providers.md "Real providers"). The one place that knows each adapter's options.
 */
/**
 * Whether a callback URL is worth sending: Replicate and Kie callbacks cannot be verified
 * without their secret (every one would answer 401), so those jobs are polled only.
 */
export function takesCallbacks (name: 'fal' | 'replicate' | 'kie', env: Record<string, string | undefined>): boolean {
  if (name === 'replicate') return Boolean(env.REPLICATE_WEBHOOK_SECRET)
  if (name === 'kie') return Boolean(env.KIE_WEBHOOK_HMAC_KEY)
  return true
}

export function createAdapter (name: 'fal' | 'replicate' | 'kie', env: Record<string, string | undefined>): UpstreamAdapter {
  switch (name) {
    case 'fal':
      return new FalAdapter({ key: env.FAL_KEY ?? '', queueUrl: env.FAL_QUEUE_URL || undefined, jwksUrl: env.FAL_JWKS_URL || undefined, apiUrl: env.FAL_API_URL || undefined })
    case 'replicate':
      return new ReplicateAdapter({ token: env.REPLICATE_API_TOKEN ?? '', apiUrl: env.REPLICATE_API_URL || undefined, webhookSecret: env.REPLICATE_WEBHOOK_SECRET || undefined })
    case 'kie':
      return new KieAdapter({ apiKey: env.KIE_API_KEY ?? '', apiUrl: env.KIE_API_URL || undefined, hmacKey: env.KIE_WEBHOOK_HMAC_KEY || undefined })
  }
}

/** A real adapter as a route kind: it ignores the ProviderJob (routing already mapped the input). */
export class AdapterProvider implements RouteProvider {
  readonly simulated = false
  constructor (readonly adapter: UpstreamAdapter, readonly takesCallbacks = true, readonly reconcileAfterMs?: number) {}
  get name (): string { return this.adapter.name }
  accepts (): boolean { return true }
  submit (req: UpstreamRequest, _job: ProviderJob, signal?: AbortSignal) { return this.adapter.submit(req, signal) }
  status (handle: UpstreamHandle, _job: ProviderJob, signal?: AbortSignal) { return this.adapter.status(handle, signal) }
  cancel (handle: UpstreamHandle, signal?: AbortSignal) { return this.adapter.cancel(handle, signal) }
  get lookup (): 'list' | 'callback' { return this.adapter.lookup }
  find (q: UpstreamLookup, signal?: AbortSignal) { return this.adapter.find(q, signal) }
  verifyCallback (req: RawCallback) { return this.adapter.verifyCallback(req) }
}
