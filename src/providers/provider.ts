/**
 * The provider interface (DESIGN.md section 5). A provider accepts a job, reports its state
 * when polled and, for the simulated one, writes the result through storage.
 */

/** What a provider needs to run a job. */
export interface ProviderJob {
  id: string
  type: 'video' | 'image' | 'audio' | 'extend'
  model: string
  /** The prompt, or for audio the text/style/lyrics, where directives are looked up. */
  text: string
  estimatedSeconds: number
  /** Normalised request (options, media URLs, output_format...). */
  request: Record<string, unknown>
}

export interface ProviderStatus {
  state: 'queued' | 'processing' | 'completed' | 'failed'
  progress: number
  /** URL of the result once completed (ours for the simulated provider, else the provider's). */
  resultUrl?: string
  error?: string
  policyViolation?: boolean
}

/** Submission refused by the provider: nothing is charged (HTTP 502 PROVIDER_ERROR). */
export class ProviderRefused extends Error {}

export interface Provider {
  readonly name: string
  /** False when the provider has no capacity for this job now: it is committed `queued`. */
  hasCapacity (job: ProviderJob): boolean
  /** Resolves with the provider's job id; rejects with ProviderRefused when refused. */
  submit (job: ProviderJob): Promise<{ providerJobId: string }>
  status (providerJobId: string, job: ProviderJob): Promise<ProviderStatus>
  cancel? (providerJobId: string): Promise<void>
}
