import { Type, type Static } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import { Job } from '../../catalog/index.js'
import { getJob, listJobs } from '../../db/jobs.js'
import { JOB_ID_RE, viewOf, type JobView } from '../../jobs/view.js'
import type { Route, RouteContext } from '../route.js'

/** The list envelope of DESIGN.md 7: `{data, total, limit, offset, has_more}`. */
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
  ...Paging,
})
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

/** Jobs (SPEC.md 4.8), scope read. */
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
      const { rows, total } = await listJobs(ctx.services.sql, ctx.caller!.accountId, { status: q.status, model: q.model, type: q.type, limit, offset })
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
