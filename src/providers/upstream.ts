/**
 * The upstream adapter contract (docs/architecture.md "Providers and media"): what a real provider adapter
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

/** What identifies a submitted upstream job (defined with the domain types: src/db stores it). */
export type { UpstreamHandle } from '../domain.js'
import type { UpstreamHandle } from '../domain.js'

/** One normalized upstream state. */
export type UpstreamState =
  | { state: 'queued' }
  | { state: 'running'; progress?: number }
  /** `outputs`: result media URLs, the primary one first. */
  | { state: 'succeeded'; outputs: string[] }
  /**
   * `inputRefused`: the provider took the job and then refused its input (fal's queue: a 422
   * validation result after the submission was accepted). The client reads a neutral message;
   * `reason` goes to the upstream history only (docs/providers.md "Failure shapes").
   */
  | { state: 'failed'; reason: string; contentPolicy: boolean; inputRefused?: boolean }
  | { state: 'canceled' }

/**
 * What a cancel achieved: true (the provider says it is cancelled), false (it will not cancel:
 * already ended, unknown, no cancel API), or 'requested' (fal's 202 CANCELLATION_REQUESTED:
 * the app decides, it may still finish and bill; only a later status says which).
 */
export type CancelOutcome = boolean | 'requested'

/**
 * A search for the upstream job a submission without a definitive answer may have created
 * (docs/providers.md "No duplicate upstream jobs"). `since` bounds the search (when the
 * submission was sent, less a margin); `candidate` is an upstream id a callback named for
 * this job (checked, not trusted: the callback URL's query is not signed).
 */
export interface UpstreamLookup {
  jobId: string
  model: string
  input: Record<string, unknown>
  callbackUrl: string | null
  since: Date
  candidate?: string
}

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
  /** Asks the provider to cancel (CancelOutcome). */
  cancel (handle: UpstreamHandle, signal?: AbortSignal): Promise<CancelOutcome>
  verifyCallback (req: RawCallback): Promise<VerifiedCallback>
  /**
   * How a lost submission can be found: 'list' (the provider lists our jobs: `find` searches
   * it, with or without a candidate) or 'callback' (no list: only an id a callback names can
   * be checked, `find` without a candidate answers []).
   */
  readonly lookup: 'list' | 'callback'
  /**
   * The upstream jobs that match a lost submission, oldest first ([] = none). Throws
   * UpstreamUnavailable when it cannot tell (the list did not answer, or is too long to read).
   */
  find (q: UpstreamLookup, signal?: AbortSignal): Promise<UpstreamHandle[]>
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
  /**
   * `notCreated`: the provider answered and made nothing (Kie's body codes 429/455/500 with no
   * taskId, fal's 409 after retries), so sending again cannot duplicate a job.
   */
  constructor (
    message: string, readonly httpStatus: number | null = null, readonly retryAfterMs: number | null = null, readonly notCreated = false
  ) { super(message) }
}

/**
 * True when a failed submission may still have created an upstream job (docs/providers.md "No
 * duplicate upstream jobs"): no answer (network, timeout, connection lost), a 5xx or 408, or an
 * error we cannot classify. A refusal, a 429 (rate limited, not accepted) and a `notCreated`
 * answer did not.
 */
export function mayHaveCreated (err: unknown): boolean {
  if (err instanceof UpstreamRefused) return false
  if (err instanceof UpstreamUnavailable) return !err.notCreated && err.httpStatus !== 429
  return true
}

/** Canonical JSON (sorted keys): two inputs are the same job's input when these are equal. */
export function sameInput (a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b)
}

function canonical (v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>
    return `{${Object.keys(o).sort().filter(k => o[k] !== undefined).map(k => `${JSON.stringify(k)}:${canonical(o[k])}`).join(',')}}`
  }
  return JSON.stringify(v) ?? 'null'
}

/** The job id our callback URL carries in its query (`?job=`), or null. */
export function jobIdOfCallbackUrl (url: unknown): string | null {
  if (typeof url !== 'string' || url === '') return null
  try { return new URL(url).searchParams.get('job') } catch { return null }
}
