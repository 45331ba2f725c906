/**
 * The upstream adapter contract (issue 11, DESIGN.md section 5): what a real provider adapter
 * (fal, replicate, kie) implements. Adapters are thin protocol clients: routing
 * (src/providers/routing.ts) has already chosen the route and mapped our request to the
 * upstream input; the JobActor owns timing, money and storage.
 *
 * Rules every adapter keeps:
 * - `submit` resolves with the upstream handle, or throws UpstreamRefused (definitive: the
 *   provider will not run this job; nothing is charged, the next route may be tried) or
 *   UpstreamUnavailable (indefinite: network error, timeout, 5xx, 429; the job may or may not
 *   exist upstream).
 * - `status` returns one normalized state. An upstream status the adapter does not know is
 *   non-terminal (`running`), never a failure. Transport trouble throws UpstreamUnavailable:
 *   the caller keeps the job running and retries with backoff.
 * - `verifyCallback` never throws for a bad request: it answers `{ ok: false, reason }`.
 *   A verified callback names the upstream id and, when the payload is trustworthy (signed
 *   over the body), the state it reports. Without `state` (Kie: its HMAC does not cover the
 *   body) the callback is only a hint: confirm with `status` before changing anything.
 */

/** What routing hands an adapter for one submission. */
export interface UpstreamRequest {
  /** Our job id (correlation; sent upstream where the API has a place for it). */
  jobId: string
  /** The route's upstream model: fal app id, Replicate `owner/name` or version id, Kie model. */
  model: string
  /** The upstream input, already mapped from our request by the route's input mapping. */
  input: Record<string, unknown>
  /** Where the provider should call back (absolute URL), or null for polling only. */
  callbackUrl: string | null
}

/**
 * What identifies a submitted upstream job. Stored with the job (JSON) so status, result and
 * cancel survive a restart and work on any node. `id` is what callbacks carry.
 */
export interface UpstreamHandle {
  id: string
  model: string
  /** URLs the provider answered with at submission (fal: status_url, response_url, cancel_url). */
  urls?: Record<string, string>
}

/** One normalized upstream state. */
export type UpstreamState =
  | { state: 'queued' }
  | { state: 'running'; progress?: number }
  /** `outputs`: result media URLs, the primary one first. */
  | { state: 'succeeded'; outputs: string[] }
  | { state: 'failed'; reason: string; contentPolicy: boolean }
  | { state: 'canceled' }

/** A callback request as it arrived: raw bytes, lower-cased header names, the query string. */
export interface RawCallback {
  headers: Record<string, string>
  query: string
  body: Buffer
}

export type VerifiedCallback =
  | { ok: true; upstreamId: string; state?: UpstreamState }
  | { ok: false; reason: string }

export interface UpstreamAdapter {
  readonly name: 'fal' | 'replicate' | 'kie'
  submit (req: UpstreamRequest, signal?: AbortSignal): Promise<UpstreamHandle>
  status (handle: UpstreamHandle, signal?: AbortSignal): Promise<UpstreamState>
  /** Asks the provider to cancel; resolves true when it confirmed, false when it cannot. */
  cancel (handle: UpstreamHandle, signal?: AbortSignal): Promise<boolean>
  verifyCallback (req: RawCallback): Promise<VerifiedCallback>
}

/** The provider definitively will not run the job (4xx other than 408/429, a refusal body). */
export class UpstreamRefused extends Error {
  readonly code = 'UPSTREAM_REFUSED'
  constructor (message: string, readonly httpStatus: number | null = null) { super(message) }
}

/**
 * The provider could not be reached or answered 5xx / 408 / 429 / a timeout. Indefinite:
 * retry later (after `retryAfterMs` when the provider said so).
 */
export class UpstreamUnavailable extends Error {
  readonly code = 'UPSTREAM_UNAVAILABLE'
  constructor (message: string, readonly httpStatus: number | null = null, readonly retryAfterMs: number | null = null) { super(message) }
}
