import { Type, type Static } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import { Job } from '../../catalog/index.js'
import { snapshot } from '../../db/connect.js'
import { getJob, jobCreditEntries, listJobs } from '../../db/jobs.js'
import { jobUpstream } from '../../db/upstream.js'
import { jobDeliveries } from '../../db/webhooks.js'
import { jobRequest } from '../../jobs/request.js'
import { JOB_ID_RE, viewOf, type JobView } from '../../jobs/view.js'
import type { Route, RouteContext } from '../route.js'

/** The list envelope of docs/api.md "Jobs": `{data, total, limit, offset, has_more}`. */
export function ListOf<T extends ReturnType<typeof Type.Object>> (item: T) {
  return Type.Object({ data: Type.Array(item), total: Type.Integer(), limit: Type.Integer(), offset: Type.Integer(), has_more: Type.Boolean() })
}
export const Paging = {
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
  offset: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000, default: 0 })),
}
export function page<T> (data: T[], total: number, limit: number, offset: number) {
  return { data, total, limit, offset, has_more: offset + data.length < total }
}

const JobsQuery = Type.Object({
  status: Type.Optional(Type.Union(['queued', 'submitted', 'processing', 'completed', 'failed', 'cancelled'].map(s => Type.Literal(s)))),
  model: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  type: Type.Optional(Type.Union(['video', 'image', 'extend', 'audio'].map(s => Type.Literal(s)))),
  q: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'Search: part of the prompt (case-insensitive), or a whole job id' })),
  ...Paging,
})

const TimelineEntry = Type.Object({
  at: Type.String({ format: 'date-time' }),
  kind: Type.Union(['created', 'charged', 'submitted', 'upstream', 'completed', 'failed', 'cancelled', 'refunded', 'webhook'].map(s => Type.Literal(s))),
  message: Type.String(),
  credits: Type.Union([Type.Integer(), Type.Null()], { description: 'Credits moved by this entry (negative: charged)' }),
})
/** GET /v1/jobs/{id}/details: what the dashboard's job page shows. */
const JobDetails = Type.Object({
  job: Job,
  request: Type.Object({
    method: Type.Literal('POST'),
    path: Type.String(),
    body: Type.Record(Type.String(), Type.Unknown(), { description: 'The request body with the defaults the service filled in; webhook_secret is never shown' }),
  }, { description: 'The creation request that reproduces this job' }),
  timeline: Type.Array(TimelineEntry, { description: 'Oldest first: creation, charge, provider states (no provider detail), end, refund, webhook deliveries' }),
})

type Entry = Static<typeof TimelineEntry>
const STATE_WORDS: Record<string, string> = { queued: 'waiting for capacity', running: 'running', processing: 'processing', succeeded: 'result ready', failed: 'failed upstream', cancelled: 'cancelled upstream' }
const JobParams = Type.Object({ id: Type.String() })

/**
 * A job of the caller's, from the read cache when live or recent, else PostgreSQL.
 * Any id that is not the caller's, malformed ones included, is 404 JOB_NOT_FOUND.
 */
export async function ownJob (ctx: RouteContext, id: string): Promise<JobView> {
  const notFound = () => new ApiError('JOB_NOT_FOUND', `No job ${id.slice(0, 64)} belongs to this account`)
  if (!JOB_ID_RE.test(id)) throw notFound()
  const cache = ctx.services.jobs
  let e = cache.get(id)
  if (!e) {
    const row = await getJob(ctx.services.sql, id)
    if (!row) throw notFound()
    e = cache.fill(row.account_id, viewOf(row))
  }
  if (e.accountId !== ctx.caller!.accountId) throw notFound()
  return e.view
}

/** Jobs (docs/api.md "Jobs"), scope read. */
export const routes: Route[] = [
  {
    method: 'GET',
    path: '/v1/jobs',
    auth: 'key',
    scope: 'read',
    summary: 'List the caller\'s jobs, newest first; filters status, model, type',
    tag: 'Jobs',
    schema: { query: JobsQuery, response: { 200: ListOf(Job) } },
    async handler (ctx) {
      const q = Object.fromEntries(ctx.query) as unknown as Static<typeof JobsQuery>
      const limit = Number(q.limit ?? 20)
      const offset = Number(q.offset ?? 0)
      const { rows, total } = await listJobs(ctx.services.sql, ctx.caller!.accountId, { status: q.status, model: q.model, type: q.type, q: q.q, limit, offset })
      return { body: page(rows.map(viewOf), total, limit, offset) }
    },
  },
  {
    method: 'GET',
    path: '/v1/jobs/:id',
    auth: 'key',
    scope: 'read',
    summary: 'Get a job (poll this every few seconds, or use SSE / webhooks)',
    tag: 'Jobs',
    errors: ['JOB_NOT_FOUND'],
    schema: { params: JobParams, response: { 200: Job } },
    async handler (ctx) {
      // Views are replaced, never changed, when a job moves: polled ones are serialised once.
      return { body: await ownJob(ctx, ctx.params.id), immutable: true }
    },
    // A cached view of the caller's own job, answered synchronously; anything else (an id with
    // escapes, a view not cached, another account's job) takes the handler above.
    fast (req, caller, services) {
      const id = req.getParameter(0)
      if (id === undefined || id.includes('%')) return undefined
      const e = services.jobs.entry(id)
      return e !== undefined && e.accountId === caller.accountId ? e : undefined
    },
    // The cache's key is the view's id, so it is the requested id, stored once.
    meterTail: (view) => (view as JobView).id,
  },
  {
    method: 'GET',
    path: '/v1/jobs/:id/details',
    auth: 'key',
    scope: 'read',
    summary: 'A job with the request that reproduces it and its timeline (the dashboard\'s job page)',
    tag: 'Jobs',
    errors: ['JOB_NOT_FOUND'],
    schema: { params: JobParams, response: { 200: JobDetails } },
    async handler (ctx) {
      const view = await ownJob(ctx, ctx.params.id)
      const sql = ctx.services.sql
      // One snapshot: a job and its refund are committed together, so the timeline never shows
      // one without the other.
      const [row, credits, up, deliveries] = await snapshot(sql, (tx) => Promise.all([
        getJob(tx, view.id), jobCreditEntries(tx, ctx.caller!.accountId, view.id), jobUpstream(tx, view.id), jobDeliveries(tx, view.id),
      ]))
      if (!row) throw new ApiError('JOB_NOT_FOUND')
      const job = viewOf(row)
      const t: Entry[] = [{ at: row.created_at.toISOString(), kind: 'created', message: `${row.type} job created on ${row.model}`, credits: null }]
      for (const c of credits) {
        if (c.kind === 'charge') t.push({ at: c.created_at.toISOString(), kind: 'charged', message: `${-c.delta} credits charged`, credits: c.delta })
        else if (c.kind === 'refund') t.push({ at: c.created_at.toISOString(), kind: 'refunded', message: `${c.delta} credits refunded`, credits: c.delta })
      }
      // Provider states only as words: never the provider, route or upstream text (docs/providers.md "Routing"
      // keeps those in the operator's view), and one entry per change of state.
      let last = ''
      for (const e of up?.events ?? []) {
        if (e.source === 'refused' || e.source === 'late') continue
        const word = e.source === 'submit' ? 'accepted by the provider' : e.source === 'stored' ? 'result stored' : e.source === 'store_failed' ? 'storing the result failed' : STATE_WORDS[e.state] ?? e.state
        if (word === last) continue
        last = word
        t.push({ at: new Date(e.at).toISOString(), kind: e.source === 'submit' ? 'submitted' : 'upstream', message: word, credits: null })
      }
      if ((up?.events ?? []).length === 0 && up?.submitted_at) t.push({ at: new Date(up.submitted_at).toISOString(), kind: 'submitted', message: 'accepted by the provider', credits: null })
      if (job.status === 'completed' || job.status === 'failed' || job.status === 'cancelled') {
        const at = job.completed_at ?? job.updated_at ?? row.updated_at.toISOString()
        t.push({ at, kind: job.status, message: job.status === 'failed' ? `failed: ${job.error_message ?? 'no reason given'}` : job.status, credits: null })
      }
      for (const d of deliveries) {
        t.push({ at: (d.delivered_at ?? d.created_at).toISOString(), kind: 'webhook', message: `${d.event} ${d.status}${d.webhook_id === null ? ' (per-job webhook_url)' : ` (webhook ${d.webhook_id})`}, ${d.attempts} attempt${d.attempts === 1 ? '' : 's'}${d.last_status_code !== null ? `, last answer ${d.last_status_code}` : ''}`, credits: null })
      }
      t.sort((a, b) => a.at < b.at ? -1 : a.at > b.at ? 1 : 0)
      return { headers: { 'Cache-Control': 'no-store' }, body: { job, request: jobRequest(row.type, row.request), timeline: t } }
    },
  },
  {
    method: 'DELETE',
    path: '/v1/jobs/:id',
    auth: 'key',
    scope: 'read',
    summary: 'Cancel a queued job (full refund); 409 CANNOT_CANCEL once it left the queue',
    tag: 'Jobs',
    errors: ['JOB_NOT_FOUND', 'CANNOT_CANCEL'],
    schema: { params: JobParams, response: { 200: Job } },
    async handler (ctx) {
      await ownJob(ctx, ctx.params.id)
      const v = await ctx.services.shards.ask(ctx.caller!.accountId, { type: 'job.cancel', accountId: ctx.caller!.accountId, jobId: ctx.params.id })
      return { body: v }
    },
  },
]
