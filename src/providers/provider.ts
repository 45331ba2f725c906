/**
 * The provider interface the job path uses (docs/architecture.md "Providers and media"). Every route kind
 * implements it: the simulated provider directly, the real adapters (fal, replicate, kie:
 * src/providers/upstream.ts) through a thin wrapper in src/providers/routing.ts. The states,
 * handles and errors are the upstream contract's: UpstreamRefused is definitive (nothing
 * charged, the next route may be tried), UpstreamUnavailable indefinite (retry).
 */
import type { CancelOutcome, RawCallback, UpstreamHandle, UpstreamLookup, UpstreamRequest, UpstreamState, VerifiedCallback } from './upstream.js'

export { mayHaveCreated, UpstreamRefused, UpstreamUnavailable } from './upstream.js'
export type { CancelOutcome, RawCallback, UpstreamHandle, UpstreamLookup, UpstreamRequest, UpstreamState, VerifiedCallback } from './upstream.js'

/** What a provider needs to run a job (besides the mapped upstream input). */
export interface ProviderJob {
  id: string
  type: 'video' | 'image' | 'audio' | 'extend'
  model: string
  /** The prompt, or for audio the text/style/lyrics, where [sim:*] directives are looked up. */
  text: string
  estimatedSeconds: number
  /** Normalised request (options, media URLs, output_format...). */
  request: Record<string, unknown>
}

/** One route kind: simulated, fal, replicate or kie. */
export interface RouteProvider {
  readonly name: string
  /** True for a provider that runs in-process (its deadline scales with SIM_SPEED). */
  readonly simulated: boolean
  /** False when this job must wait for capacity whatever the route's cap ([sim:queue]). */
  accepts (job: ProviderJob): boolean
  submit (req: UpstreamRequest, job: ProviderJob, signal?: AbortSignal): Promise<UpstreamHandle>
  status (handle: UpstreamHandle, job: ProviderJob, signal?: AbortSignal): Promise<UpstreamState>
  cancel (handle: UpstreamHandle, signal?: AbortSignal): Promise<CancelOutcome>
  /** How a lost submission is found (upstream.ts); absent: in-process, nothing can be lost. */
  readonly lookup?: 'list' | 'callback'
  find? (q: UpstreamLookup, signal?: AbortSignal): Promise<UpstreamHandle[]>
  /** The routing file's `reconcile_after_s` (ms): the first reconciliation poll after submission instead of the estimate. */
  readonly reconcileAfterMs?: number
  /** True when callbacks can be verified (fal always; Replicate and Kie with their secret): a callback URL is sent. */
  readonly takesCallbacks?: boolean
  /** Absent: the provider sends no callbacks (simulated). */
  verifyCallback? (req: RawCallback): Promise<VerifiedCallback>
}
