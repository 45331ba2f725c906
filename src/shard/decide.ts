import { ApiError, emailUnverified } from '../errors.js'
import type { AccountView, JobCaller, JobSpec } from '../domain.js'

/**
 * The account's decisions as pure functions of (state, request) -> refusal or go. No threads,
 * no database, no clock: the actor feeds them its memory (or, across nodes, what Redis and the
 * conditional charge answer) and applies the outcome. The API's order of the checks (ban/lock,
 * free trial, concurrency, balance) is AccountActor.admit's: refuseAccount, then the key's slot
 * (refuseConcurrency, in slots.ts, possibly counted in Redis), then refuseBalance.
 */

/** Where the free trial and upgrade prompts point (docs/api.md "Errors", upgrade_required). */
import { PRICING_URL } from '../catalog/pricing.js'
export { PRICING_URL }

/** Credits and trial videos held by creations decided but not committed yet. */
export interface Held { credits: number; trialVideos: number }

/** A video (or extension) made before the first purchase is the free-trial video (docs/api.md "Jobs"). */
export function isTrialVideo (a: AccountView, spec: JobSpec): boolean {
  return !a.has_purchased && !a.enterprise && (spec.type === 'video' || spec.type === 'extend')
}

/** Ban, credit lock and the one free video. */
export function refuseAccount (a: AccountView, held: Held, spec: JobSpec): ApiError | null {
  if (a.banned) return new ApiError('ACCOUNT_BANNED')
  if (!a.email_verified) return emailUnverified()
  if (a.credits_locked) return new ApiError('NOT_ELIGIBLE', 'Credits on this account are locked', { reason: 'credits_locked', reasons: ['credits_locked'] })
  if (isTrialVideo(a, spec) && a.free_videos_used + held.trialVideos >= 1) return trialUsed()
  return null
}

export function trialUsed (): ApiError {
  return new ApiError('upgrade_required', 'The free trial includes one video; buy credits to make more', { pricing_url: PRICING_URL })
}

/** `inFlight` jobs of the caller's key already running (or held). */
export function refuseConcurrency (caller: Pick<JobCaller, 'maxConcurrent'>, inFlight: number): ApiError | null {
  if (inFlight < caller.maxConcurrent) return null
  return new ApiError('concurrency_limit_reached', `This key already has ${inFlight} jobs in flight (max ${caller.maxConcurrent}); nothing was charged`,
    { max_concurrent: caller.maxConcurrent, in_flight: inFlight })
}

/** The balance net of what pending creations hold must cover the price. */
export function refuseBalance (a: AccountView, held: Held, spec: JobSpec): ApiError | null {
  const available = a.credits - held.credits
  if (available >= spec.credits) return null
  return insufficient(spec.credits, available)
}

export function insufficient (required: number, available: number): ApiError {
  const avail = Math.max(0, available)
  return new ApiError('INSUFFICIENT_CREDITS', `This job costs ${required} credits; the balance is ${avail}`, { required, available: avail })
}

/** Refusals another node's writes can make stale: worth one reload before answering. */
export function mayBeStale (err: unknown): boolean {
  return err instanceof ApiError && (err.code === 'INSUFFICIENT_CREDITS' || err.code === 'upgrade_required' || err.code === 'concurrency_limit_reached')
}

/** What an Idempotency-Key already bound on this account means for a new request. */
export type IdemEntry = { fingerprint: string; jobId: string } | { fingerprint: string; pending: Promise<unknown> }
/** Idempotency keys remembered in memory; older ones are looked up in the jobs table again. */
export const IDEM_MEMORY = 10_000

/** Binds `key` to its job (most recent last); the oldest settled keys past `max` are forgotten. */
export function bindIdem (idem: Map<string, IdemEntry>, key: string, fingerprint: string | undefined, jobId: string, max = IDEM_MEMORY): void {
  idem.delete(key)
  idem.set(key, { fingerprint: fingerprint ?? '', jobId })
  let excess = idem.size - max
  for (const [k, e] of idem) {
    if (excess <= 0) break
    if ('pending' in e) continue
    idem.delete(k)
    excess--
  }
}

export type IdemDecision =
  | { kind: 'new' }
  | { kind: 'replay'; jobId: string }
  | { kind: 'wait'; pending: Promise<unknown> }
  | { kind: 'refuse'; error: ApiError }

export function decideIdempotency (entry: IdemEntry | undefined, fingerprint: string | undefined): IdemDecision {
  if (entry === undefined) return { kind: 'new' }
  if (entry.fingerprint !== (fingerprint ?? '')) return { kind: 'refuse', error: new ApiError('IDEMPOTENCY_CONFLICT') }
  return 'pending' in entry ? { kind: 'wait', pending: entry.pending } : { kind: 'replay', jobId: entry.jobId }
}

/**
 * A conditional charge the database refused (another node spent the balance or used the free
 * video first): which refusal to answer, from the account as reloaded after it.
 */
export function refusedCharge (fresh: AccountView, trial: boolean, spec: JobSpec): ApiError {
  if (trial && isTrialVideo(fresh, spec) && fresh.free_videos_used >= 1) return trialUsed()
  return insufficient(spec.credits, fresh.credits)
}
