import { Type } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import { getJob } from '../../db/jobs.js'
import { appendEvents, findJobByUpstream, jobUpstream } from '../../db/upstream.js'
import { viewOf } from '../../jobs/view.js'
import type { Route, RouteContext } from '../route.js'
import type { VerifiedCallback } from '../../providers/upstream.js'

/**
 * Largest callback body read (docs/operations.md "Hostile input"): provider payloads carry
 * URLs, not media. A larger declared Content-Length is refused before a byte is read, a larger
 * streamed body as soon as it crosses the cap; no signature work happens on either.
 */
export const CALLBACK_BODY_LIMIT = 256 * 1024
/**
 * Refused callbacks (unknown provider, oversized, failed verification) an address may send a
 * minute before its callbacks are answered 429 with no work at all. A provider's verified
 * callbacks never count, so real traffic is never throttled.
 */
export const CALLBACK_REFUSALS_PER_MINUTE = 60
const PROVIDER_NAMES = new Set(['fal', 'replicate', 'kie'])
/**
 * A verification that failed on our side, not the sender's: the provider's signing keys could
 * not be fetched (fal's JWKS endpoint down, or its request waiting behind the provider's request
 * budget). Still 401 (the provider retries), but not a refusal of the address: counting it would
 * answer the provider's own callbacks 429 for the rest of the minute once 60 had arrived during
 * the outage (docs/operations.md "Provider callbacks").
 */
function keysUnavailable (reason: string): boolean {
  return /JWKS unavailable/.test(reason)
}
/** Waits before each further lookup of an upstream id not found yet (2.5 s in all). */
const LOOKUP_RETRY_MS = [50, 150, 300, 500, 1500]

/** The body, read whole by the front end up to CALLBACK_BODY_LIMIT (the route's rawBodyLimit). */
async function readRaw (ctx: RouteContext): Promise<Buffer> {
  try { return await ctx.rawBytes! } catch (err) {
    throw err instanceof ApiError && err.code === 'PAYLOAD_TOO_LARGE' ? tooLarge() : err
  }
}

function tooLarge (): ApiError {
  return new ApiError('PAYLOAD_TOO_LARGE', `A provider callback body may be at most ${CALLBACK_BODY_LIMIT / 1024} KiB`, { details: { max_bytes: CALLBACK_BODY_LIMIT } })
}

/**
 * POST /v1/providers/{name}/callback (docs/operations.md "Hostile input"): public, the raw body
 * verified by the provider's adapter. 401 on failed verification, 200 when verified.
 * Idempotent: the job's transition is conditional (a terminal job never changes again), so a
 * replayed callback changes nothing; forged and stale ones fail verification. Cheapest checks
 * first: the address's refusal window, the declared length, the streamed length, then the
 * adapter's header and timestamp checks before any hashing.
 */
async function callback (ctx: RouteContext) {
  const refusals = ctx.services.callbackRefusals
  // The address is read only when a refusal is on record or one is to be counted: a provider's
  // stream of verified callbacks never pays for it.
  const wait = refusals.size === 0 ? 0 : refusals.wait(ctx.ip)
  if (wait > 0) {
    const e = new ApiError('RATE_LIMIT_EXCEEDED', `Too many refused callbacks from this address; retry in ${wait} s`, { retry_after: wait })
    e.headers = { 'Retry-After': String(wait) }
    throw e
  }
  let v: VerifiedCallback
  const name = ctx.params.name
  try {
    if (!PROVIDER_NAMES.has(name)) throw new ApiError('NOT_FOUND', `No provider ${JSON.stringify(name)} (fal, replicate or kie)`)
    const provider = ctx.services.providers.provider(name)
    if (!provider?.verifyCallback) throw new ApiError('NOT_FOUND', `Provider ${name} is not configured on this service`)
    const declared = Number(ctx.headers['content-length'])
    if (Number.isFinite(declared) && declared > CALLBACK_BODY_LIMIT) throw tooLarge()
    const body = await readRaw(ctx)
    v = await provider.verifyCallback({ headers: ctx.headers, query: ctx.rawQuery, body })
  } catch (e) {
    if (e instanceof ApiError) refusals.hit(ctx.ip)
    throw e
  }
  if (!v.ok) {
    ctx.services.log.warn({ provider: name, reason: v.reason }, 'provider callback refused')
    if (!keysUnavailable(v.reason)) refusals.hit(ctx.ip)
    throw new ApiError('CALLBACK_UNVERIFIED', `Callback verification failed: ${v.reason}`)
  }
  // Our callback URL names the job and its account: the account's shard answers without a
  // database read when it runs that job holding this upstream id (docs/providers.md
  // "Callbacks"); neither query parameter is trusted, so anything else is looked up below.
  const named = ctx.query.get('job')
  const account = Number(ctx.query.get('account') ?? NaN)
  if (named !== null && Number.isSafeInteger(account) && account > 0) {
    const outcome = await ctx.services.shards.ask(account, { type: 'job.callback', accountId: account, jobId: named, state: v.state, upstreamId: v.upstreamId })
    if (outcome !== 'unmatched') return { status: 200, body: { received: true, job_id: named, outcome } }
  }
  // A fast provider can call back before the creation that submitted the job has committed
  // its row: look again for a moment before calling the id unknown.
  let job = await findJobByUpstream(ctx.services.sql, name, v.upstreamId)
  for (const ms of LOOKUP_RETRY_MS) {
    if (job) break
    await new Promise(resolve => setTimeout(resolve, ms))
    job = await findJobByUpstream(ctx.services.sql, name, v.upstreamId)
  }
  if (!job) {
    // No job holds this upstream id. Our callback URL names the job it was sent for (`?job=`):
    // a submission whose answer was lost, or a duplicate (docs/providers.md "No duplicate
    // upstream jobs"). The job checks the id with the provider before adopting or cancelling it
    // (the query is not signed); a job that already ended gets the id in its history.
    const row = named ? await getJob(ctx.services.sql, named) : undefined
    if (!row || row.provider_job_id === v.upstreamId) return { status: 200, body: { received: true, job_id: null, outcome: 'unknown_upstream_id' } }
    if (row.status === 'completed' || row.status === 'failed' || row.status === 'cancelled') {
      await appendEvents(ctx.services.sql, [{ job_id: row.id, source: 'late', route: null, state: 'duplicate', detail: { provider: name, upstream_id: v.upstreamId, state: v.state?.state ?? null, note: 'an upstream job named for this job after it ended; no money moved' } }])
      return { status: 200, body: { received: true, job_id: row.id, outcome: 'already_terminal' } }
    }
    const outcome = await ctx.services.shards.ask(Number(row.account_id), { type: 'job.callback', accountId: Number(row.account_id), jobId: row.id, upstream: { provider: name, id: v.upstreamId } })
    return { status: 200, body: { received: true, job_id: row.id, outcome: outcome === 'live' ? 'checked' : outcome } }
  }
  if (job.status === 'completed' || job.status === 'failed' || job.status === 'cancelled') {
    // Already ended: nothing moves. A success reported after our refund is kept for the operator.
    if (v.state?.state === 'succeeded' && job.status !== 'completed') {
      await appendEvents(ctx.services.sql, [{ job_id: job.id, source: 'late', route: null, state: 'succeeded', detail: { via: 'callback', outputs: v.state.outputs, note: 'upstream success after the job ended; no money moved' } }])
    }
    return { status: 200, body: { received: true, job_id: job.id, outcome: 'already_terminal' } }
  }
  const outcome = await ctx.services.shards.ask(job.account_id, { type: 'job.callback', accountId: job.account_id, jobId: job.id, state: v.state })
  return { status: 200, body: { received: true, job_id: job.id, outcome } }
}

const CallbackAnswer = Type.Object({
  received: Type.Boolean(),
  job_id: Type.Union([Type.String(), Type.Null()]),
  outcome: Type.String({ description: 'live | settled | ignored | checked | already_terminal | unknown_upstream_id' }),
})

const AdminJob = Type.Object({
  job: Type.Object({}, { additionalProperties: true, description: 'The Job, as GET /v1/jobs/{id} shows it' }),
  account_id: Type.Integer(),
  provider: Type.String(),
  route: Type.Union([Type.String(), Type.Null()], { description: 'model#index:provider:upstream model of PROVIDERS_FILE; null for the implicit simulated route' }),
  upstream: Type.Union([Type.Object({ id: Type.String() }, { additionalProperties: true }), Type.Null()], { description: 'The upstream handle: id, model, provider URLs' }),
  submitted_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  deadline_at: Type.String({ format: 'date-time' }),
  owner: Type.Union([Type.String(), Type.Null()]),
  upstream_events: Type.Array(Type.Object({
    at: Type.String({ format: 'date-time' }),
    source: Type.String({ description: 'submit | refused | poll | callback | cancel | deadline | late | stored | store_failed (submit states: submitted, unanswered, found, not_found, not_ours, lookup_failed, lookup_impossible)' }),
    route: Type.Union([Type.String(), Type.Null()]),
    state: Type.String(),
    detail: Type.Unknown(),
  })),
})

export const routes: Route[] = [
  {
    method: 'POST',
    path: '/v1/providers/:name/callback',
    auth: 'public',
    rawBody: true,
    rawBodyLimit: CALLBACK_BODY_LIMIT,
    summary: 'Provider callback (fal, replicate, kie): verified per provider; 401 when verification fails',
    tag: 'Providers',
    errors: ['CALLBACK_UNVERIFIED', 'NOT_FOUND', 'PAYLOAD_TOO_LARGE', 'RATE_LIMIT_EXCEEDED'],
    schema: { params: Type.Object({ name: Type.String() }), response: { 200: CallbackAnswer } },
    rawBodySchema: { 'application/json': { schema: { type: 'object', description: "The provider's callback payload, verified as raw bytes" } } },
    handler: callback,
  },
  {
    method: 'GET',
    path: '/v1/admin/jobs/:jobId',
    auth: 'admin',
    summary: 'Operator view of a job: the job, its route, upstream handle and upstream status history',
    tag: 'Admin',
    errors: ['JOB_NOT_FOUND'],
    schema: { params: Type.Object({ jobId: Type.String() }), response: { 200: AdminJob } },
    async handler (ctx) {
      const row = await getJob(ctx.services.sql, ctx.params.jobId)
      if (!row) throw new ApiError('JOB_NOT_FOUND', 'No job with that id')
      const up = await jobUpstream(ctx.services.sql, row.id)
      return {
        headers: { 'Cache-Control': 'no-store' },
        body: {
          job: viewOf(row),
          account_id: Number(row.account_id),
          provider: row.provider,
          route: up?.route ?? null,
          upstream: up?.upstream ?? (row.provider_job_id ? { id: row.provider_job_id } : null),
          submitted_at: up?.submitted_at ?? null,
          deadline_at: row.deadline_at,
          owner: row.owner ?? null,
          upstream_events: up?.events ?? [],
        },
      }
    },
  },
]
