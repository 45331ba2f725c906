import type { ProviderJob, UpstreamHandle } from '../providers/provider.js'
import type { Route } from '../providers/registry.js'
import { mapInput } from '../providers/routing.js'

/**
 * The provider-facing helpers of the job path (issue 11), kept out of account-actor.ts.
 */

/** Where a provider calls back (DESIGN.md 7): `{PUBLIC_BASE_URL}/v1/providers/{name}/callback`. */
export function callbackUrlOf (publicBaseUrl: string, provider: string, jobId: string): string {
  return `${publicBaseUrl}/v1/providers/${provider}/callback?job=${encodeURIComponent(jobId)}`
}

/**
 * The job's deadline, counted from when a provider got it (DESIGN.md 5; issue 10 point 9: a
 * queued job has none). Simulated routes: max(4 x estimate, 10 min) of simulated time (divided
 * by SIM_SPEED). Real routes: max(4 x estimate, 30 min) of real time, whatever SIM_SPEED says:
 * a real provider's own queue can hold a job that long. A route's `deadline_s` overrides both.
 */
export function deadlineOf (route: Route, estimatedSeconds: number, simSpeed: number, from: number): Date {
  if (route.spec.deadline_s !== undefined) return new Date(from + route.spec.deadline_s * 1000)
  if (route.provider.simulated) return new Date(from + Math.max(estimatedSeconds * 4, 600) * 1000 / simSpeed)
  return new Date(from + Math.max(estimatedSeconds * 4, 1800) * 1000)
}

/** Submits `job` on `route`: the route's input mapping applied, our callback URL when its callbacks can be verified. */
export function submitOn (route: Route, job: ProviderJob, prompt: string | null, publicBaseUrl: string): Promise<UpstreamHandle> {
  const input = mapInput(route.spec.input, job.request, prompt)
  const callbackUrl = route.provider.verifyCallback && route.provider.takesCallbacks ? callbackUrlOf(publicBaseUrl, route.provider.name, job.id) : null
  return route.provider.submit({ jobId: job.id, model: route.spec.model, input, callbackUrl }, job)
}
