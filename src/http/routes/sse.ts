import { Type } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import { refuseQueryCredential, tierOf } from '../auth.js'
import type { Route } from '../route.js'
import { ownJob } from './jobs.js'
import { TERMINAL } from '../../jobs/view.js'
import { eventIdOf } from '../sse.js'
import { writeResponse } from '../respond.js'

const TicketRequest = Type.Object({ jobId: Type.String({ minLength: 1, maxLength: 100 }) })
const TicketResponse = Type.Object({ ticket: Type.String(), expires_in: Type.Literal(300) })

/** Server-Sent Events (docs/api.md "Server-Sent Events"). */
export const routes: Route[] = [
  {
    method: 'POST',
    path: '/v1/sse/tickets',
    auth: 'key',
    scope: 'read',
    summary: 'A 5-minute ticket for one job\'s SSE stream, for browsers (EventSource cannot send headers)',
    tag: 'Events',
    errors: ['JOB_NOT_FOUND'],
    schema: { body: TicketRequest, response: { 200: TicketResponse } },
    async handler (ctx) {
      const { jobId } = ctx.body as { jobId: string }
      await ownJob(ctx, jobId)
      // A ticket is a credential for the stream: no cache keeps it.
      return { headers: { 'Cache-Control': 'no-store' }, body: ctx.services.tickets.issue(jobId, ctx.caller!.accountId) }
    },
  },
  {
    method: 'GET',
    path: '/v1/sse/jobs/:id',
    // Credentials are checked here: normal auth headers (servers) or ?ticket= (browsers).
    auth: 'public',
    rawBody: true,
    summary: 'Stream a job\'s events: status on every change, heartbeat, done last. Auth headers or ?ticket=',
    tag: 'Events',
    errors: ['AUTH_REQUIRED', 'INVALID_API_KEY', 'INVALID_TICKET', 'JOB_NOT_FOUND', 'TOO_MANY_STREAMS', 'RATE_LIMIT_EXCEEDED', 'insufficient_scope'],
    schema: { params: Type.Object({ id: Type.String() }), query: Type.Object({ ticket: Type.Optional(Type.String({ maxLength: 1024 })) }) },
    headers: [{ name: 'Last-Event-ID', in: 'header', required: false, description: 'Resume after this event id', schema: { type: 'string' } }],
    responseContent: { 204: {}, 200: { 'text/event-stream': { schema: { type: 'string', description: 'Events `status` {id, status, progress, result_url?, error_message?}, `heartbeat` {ts} every 15 s, `done` {id, status} last; every event has an `id:`' } } } },
    async handler (ctx) {
      const s = ctx.services
      const jobId = ctx.params.id
      refuseQueryCredential(ctx.query, 'use ?ticket= (POST /v1/sse/tickets) or auth headers')
      const ticket = ctx.query.get('ticket')
      let accountId: number
      let maxStreams: number
      if (ticket !== null) {
        accountId = s.tickets.verify(ticket, jobId)
        const a = await s.auth.account(accountId)
        if (!a) throw new ApiError('INVALID_TICKET', 'SSE ticket belongs to a deleted account')
        if (a.banned) throw new ApiError('ACCOUNT_BANNED')
        maxStreams = s.config.tierLimits[tierOf(a)].max_streams
        ctx.caller = { kind: 'key', accountId, keyId: null, tier: tierOf(a), scopes: ['read'], bucket: `a${accountId}` }
      } else {
        const caller = await s.auth.authenticate({ ...ctx.route!, auth: 'key', scope: 'read' }, ctx.headers, ctx.query)
        ctx.caller = caller
        accountId = caller.accountId
        maxStreams = s.config.tierLimits[caller.tier].max_streams
        await ctx.rateLimit(caller)
      }
      const view = await ownJob(ctx, jobId)
      const lastHeader = ctx.headers['last-event-id'] ?? ctx.query.get('lastEventId')
      const last = Number(lastHeader ?? 0)
      // The newest view: an event may have landed while ownJob read the database.
      const current = s.jobs.get(jobId)?.view ?? view
      // docs/api.md "Server-Sent Events": a reconnect that already saw `done` of a terminal job gets 204, the SSE
      // standard's way to stop a client; without it every EventSource reconnects every 3 s forever.
      if (TERMINAL.has(current.status) && lastHeader !== undefined && lastHeader !== null && Number.isFinite(last) && last >= eventIdOf(current) + 1) {
        if (ctx.aborted()) return { status: -1 }
        writeResponse(ctx.res!, 204, { ...ctx.baseHeaders(), 'Cache-Control': 'no-store' }, undefined)
        return { status: 204 }
      }
      if (!s.sse.reserve(accountId, maxStreams)) {
        throw new ApiError('TOO_MANY_STREAMS', `This account already has ${s.sse.openStreams(accountId)} SSE streams open (max ${maxStreams})`, { max_streams: maxStreams })
      }
      if (ctx.aborted()) { s.sse.release(accountId); return { status: -1 } }
      const res = ctx.res!
      const headers = ctx.baseHeaders()
      res.cork(() => s.sse.open(res, (fn) => ctx.onAborted(fn), headers, current, accountId, Number.isFinite(last) ? last : 0))
      return { status: 200 }
    },
  },
]
