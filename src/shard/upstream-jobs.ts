import type { Q } from '../db/connect.js'
import { claimedUpstreamIds } from '../db/upstream.js'
import type { ProviderJob, UpstreamHandle } from '../providers/provider.js'
import type { Route } from '../providers/registry.js'
import { mapInput } from '../providers/routing.js'

/**
 * The provider-facing helpers of the job path, kept out of account-actor.ts.
 */

/**
 * Where a provider calls back (docs/providers.md "Routing"):
 * `{PUBLIC_BASE_URL}/v1/providers/{name}/callback?job={id}&account={account}`. The account
 * lets the front end ask the job's shard without reading the database (docs/providers.md
 * "Callbacks"); neither is trusted: the shard answers only for a job it runs with that
 * upstream id.
 */
export function callbackUrlOf (publicBaseUrl: string, provider: string, jobId: string, account: number): string {
  return `${publicBaseUrl}/v1/providers/${provider}/callback?job=${encodeURIComponent(jobId)}&account=${account}`
}

/**
 * The job's deadline, counted from when a provider got it (docs/architecture.md "Providers and media": a
 * queued job has none). Simulated routes: max(4 x estimate, 10 min) of simulated time (divided
 * by SIM_SPEED). Real routes: max(4 x estimate, 30 min) of real time, whatever SIM_SPEED says:
 * a real provider's own queue can hold a job that long. A route's `deadline_s` overrides both.
 */
export function deadlineOf (route: Route, estimatedSeconds: number, simSpeed: number, from: number): Date {
  if (route.spec.deadline_s !== undefined) return new Date(from + route.spec.deadline_s * 1000)
  if (route.provider.simulated) return new Date(from + Math.max(estimatedSeconds * 4, 600) * 1000 / simSpeed)
  return new Date(from + Math.max(estimatedSeconds * 4, 1800) * 1000)
}

/** Our callback URL for `job` on `route` (the job id in its query), or null when the route's callbacks cannot be verified. */
function callbackFor (route: Route, jobId: string, account: number, publicBaseUrl: string): string | null {
  return route.provider.verifyCallback && route.provider.takesCallbacks ? callbackUrlOf(publicBaseUrl, route.provider.name, jobId, account) : null
}

/** Submits `job` on `route`: the route's input mapping applied, our callback URL when its callbacks can be verified. */
export function submitOn (route: Route, job: ProviderJob, account: number, prompt: string | null, publicBaseUrl: string): Promise<UpstreamHandle> {
  const input = mapInput(route.spec.input, job.request, prompt)
  return route.provider.submit({ jobId: job.id, model: route.spec.model, input, callbackUrl: callbackFor(route, job.id, account, publicBaseUrl) }, job)
}

/** Budget of one lookup of a lost submission. */
const LOOKUP_TIMEOUT_MS = 30_000

/**
 * The upstream jobs on `route` that are `job`'s lost submission (docs/providers.md "No duplicate
 * upstream jobs"): the provider's own search (its adapter's `find`, given the input and callback
 * URL the submission carried), less those another job already holds. Oldest first; [] when the
 * provider has none; throws when it cannot tell.
 */
export async function findLost (
  sql: Q, route: Route, job: ProviderJob, account: number, prompt: string | null, publicBaseUrl: string, since: Date, candidate?: string, signal?: AbortSignal
): Promise<UpstreamHandle[]> {
  const p = route.provider
  if (!p.find) return []
  const found = await p.find({
    jobId: job.id, model: route.spec.model, input: mapInput(route.spec.input, job.request, prompt),
    callbackUrl: callbackFor(route, job.id, account, publicBaseUrl), since, candidate,
  }, signal ?? AbortSignal.timeout(LOOKUP_TIMEOUT_MS))
  const taken = await claimedUpstreamIds(sql, p.name, found.map(h => h.id), job.id)
  return found.filter(h => !taken.has(h.id))
}
