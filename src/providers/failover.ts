/**
 * Provider failover, written once (docs/providers.md "Routing"): the route-by-route walk and
 * what a submission's answer means for the route, its breaker and the job. Used by the creation
 * path (src/shard/creation.ts: the provider is asked before anything is charged) and by a
 * running job that submits later (src/shard/job-actor.ts: queued for capacity, refused after a
 * timeout, a lost submission not found).
 */
import { mayHaveCreated, UpstreamRefused, UpstreamUnavailable, type UpstreamHandle } from './provider.js'
import type { Route } from './registry.js'
import type { UpstreamEvent } from '../db/upstream.js'

/** A submission's answer, judged. */
export type SubmitVerdict =
  /** The provider took the job. */
  | { kind: 'taken'; handle: UpstreamHandle }
  /** Definitive: this route will not run this request; the next one may (nothing charged for it). */
  | { kind: 'refused'; error: unknown }
  /**
   * No definitive answer from a real route that keeps history: the provider may have created
   * the job, so nothing is sent again on this route before it was looked for
   * (docs/providers.md "No duplicate upstream jobs").
   */
  | { kind: 'unanswered'; error: unknown }
  /** The provider is at capacity for us (429): this route again after Retry-After. */
  | { kind: 'rate_limited'; error: unknown; retryAfterMs: number | null }
  /** Indefinite and not created (network before sending, 5xx that says so): retry or move on. */
  | { kind: 'unavailable'; error: unknown; retryAfterMs: number | null }

/**
 * Judges a submission's outcome on `route` and counts it on the route's breaker: a success
 * closes it; a failure of the route (indefinite, unanswered) counts; a refusal of the input and
 * a 429 (the provider's capacity, not a fault) do not.
 */
export function judgeSubmission (route: Route, outcome: { ok: true; handle: UpstreamHandle } | { ok: false; error: unknown }): SubmitVerdict {
  const b = route.breaker
  if (outcome.ok) { b.success(); return { kind: 'taken', handle: outcome.handle } }
  const err = outcome.error
  const retryAfterMs = err instanceof UpstreamUnavailable ? err.retryAfterMs : null
  if (err instanceof UpstreamRefused) { b.refused(); return { kind: 'refused', error: err } }
  if (mayHaveCreated(err) && route.recordsHistory && !route.provider.simulated) { b.failure(); return { kind: 'unanswered', error: err } }
  if (err instanceof UpstreamUnavailable && err.httpStatus === 429) return { kind: 'rate_limited', error: err, retryAfterMs }
  b.failure()
  return { kind: 'unavailable', error: err, retryAfterMs }
}

/**
 * The first route at or after `from` that serves the request and whose breaker lets a
 * submission through now (a half-open breaker lets one trial through), or -1.
 */
export function nextOpenRoute (routes: readonly Route[], from: number, serves: (r: Route) => boolean = () => true): number {
  for (let i = from; i < routes.length; i++) {
    const r = routes[i]
    if (serves(r) && r.breaker.allow()) return i
  }
  return -1
}

/** The upstream history line of a verdict that did not take the job (refused, unanswered, rate limited, unavailable). */
export function verdictEvent (v: Exclude<SubmitVerdict, { kind: 'taken' }>, jobId: string, route: Route, extra?: Record<string, unknown>): UpstreamEvent {
  const error = String((v.error as Error)?.message ?? v.error)
  if (v.kind === 'unanswered') return { job_id: jobId, source: 'submit', route: route.key, state: 'unanswered', detail: { error, ...extra } }
  if (v.kind === 'rate_limited') return { job_id: jobId, source: 'refused', route: route.key, state: 'rate_limited', detail: { retry_after_ms: v.retryAfterMs ?? 1000, ...extra } }
  return { job_id: jobId, source: 'refused', route: route.key, state: v.kind === 'refused' ? 'refused' : 'unavailable', detail: { error, ...extra } }
}
