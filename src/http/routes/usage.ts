import { Type, type Static } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import { validationError } from '../../catalog/validate.js'
import { MAX_ACTIVE_KEYS } from '../../db/keys.js'
import { limitCounts, usageRows } from '../../db/usage.js'
import { tierOf } from '../auth.js'
import type { Route } from '../route.js'

/** docs/api.md "Usage and limits": active webhooks per account (the same number src/db/webhooks.ts enforces). */
const MAX_ACTIVE_WEBHOOKS = 5
/** Longest summary range, in days (both ends included): a leap year. */
export const MAX_SUMMARY_DAYS = 366
const DAY_MS = 86_400_000
const JOB_STATUSES = ['queued', 'submitted', 'processing', 'completed', 'failed', 'cancelled'] as const

const UtcDate = (description: string) => Type.String({ format: 'date', description })
const SummaryQuery = Type.Object({
  from: Type.Optional(UtcDate('First day (UTC, YYYY-MM-DD, included); default `to` minus 29 days')),
  to: Type.Optional(UtcDate('Last day (UTC, YYYY-MM-DD, included); default today. At most 366 days from `from` to `to`')),
})

const Counts = (description: string) => Type.Record(Type.String(), Type.Integer(), { description })
const Summary = Type.Object({
  from: Type.String({ format: 'date' }),
  to: Type.String({ format: 'date' }),
  requests: Type.Integer({ description: 'Metered API requests of the account in the range (before this one)' }),
  credits_charged: Type.Integer({ description: 'Credits charged for jobs (positive)' }),
  credits_refunded: Type.Integer({ description: 'Credits refunded for failed or cancelled jobs' }),
  net_credits: Type.Integer({ description: 'credits_charged - credits_refunded' }),
  jobs_by_status: Counts('Jobs created in the range by current status; every status is listed'),
  jobs_by_model: Counts('Jobs created in the range by model id; models without jobs are left out'),
  daily: Type.Array(Type.Object({
    date: Type.String({ format: 'date' }),
    requests: Type.Integer(),
    credits: Type.Integer({ description: 'Net credits of the day: charged minus refunded (negative when refunds of earlier charges dominate)' }),
    jobs: Type.Integer(),
  }), { description: 'Every day of the range, oldest first, zeros included' }),
})

const Limits = Type.Object({
  tier: Type.Union([Type.Literal('free'), Type.Literal('pro'), Type.Literal('enterprise')], { description: 'The account\'s tier' }),
  rate_limit_rpm: Type.Integer({ description: 'Requests per minute of this credential (a dashboard session has its own limit)' }),
  max_concurrent: Type.Integer({ description: 'Jobs in flight allowed for this credential' }),
  in_flight: Type.Integer({ description: 'Queued, submitted or processing jobs of this key (of the whole account for a session)' }),
  max_streams: Type.Integer(),
  open_streams: Type.Integer({ description: 'SSE streams of the account open on this node' }),
  active_keys: Type.Integer(),
  max_active_keys: Type.Integer(),
  active_webhooks: Type.Integer(),
  max_active_webhooks: Type.Integer(),
})

function invalid (path: string, message: string): ApiError {
  return validationError([{ path, message }], 'Query string')
}

const iso = (ms: number) => new Date(ms).toISOString().slice(0, 10)

/** Resolves the summary range (UTC dates, both ends included); 400 VALIDATION_ERROR when reversed or too long. */
export function summaryRange (q: { from?: string; to?: string }, nowMs = Date.now()): { from: string; to: string; days: number } {
  const to = q.to ?? iso(nowMs)
  const toMs = Date.parse(`${to}T00:00:00Z`)
  const from = q.from ?? iso(toMs - 29 * DAY_MS)
  const fromMs = Date.parse(`${from}T00:00:00Z`)
  if (toMs < fromMs) throw invalid('/to', 'must be on or after from')
  const days = Math.round((toMs - fromMs) / DAY_MS) + 1
  if (days > MAX_SUMMARY_DAYS) throw invalid('/from', `range spans ${days} days; at most ${MAX_SUMMARY_DAYS}`)
  return { from, to, days }
}

/** Usage analytics (docs/api.md "Usage and limits"), scope read. */
export const routes: Route[] = [
  {
    method: 'GET',
    path: '/v1/usage/summary',
    auth: 'key',
    scope: 'read',
    summary: 'Requests, credits charged and refunded, jobs by status and model, and a daily series over a date range (default the last 30 days)',
    tag: 'Usage',
    schema: { query: SummaryQuery, response: { 200: Summary } },
    async handler (ctx) {
      const q = Object.fromEntries(ctx.query) as Static<typeof SummaryQuery>
      const { from, to, days } = summaryRange(q)
      const accountId = ctx.caller!.accountId
      // The caller's own recent requests may still sit in the metering buffer (flushed every
      // second); write them first. Free when none are buffered.
      await ctx.services.metering.flushFor(accountId)
      const rows = await usageRows(ctx.services.sql, accountId, from, to)

      const fromMs = Date.parse(`${from}T00:00:00Z`)
      const daily = Array.from({ length: days }, (_, i) => ({ date: iso(fromMs + i * DAY_MS), requests: 0, credits: 0, jobs: 0 }))
      const byDate = new Map(daily.map(d => [d.date, d]))
      let requests = 0
      let charged = 0
      let refunded = 0
      for (const r of rows.requests) {
        requests += r.requests
        byDate.get(r.day)!.requests += r.requests
      }
      for (const c of rows.credits) {
        // Charges are negative deltas, refunds positive: both reported as positive amounts.
        if (c.kind === 'charge') charged -= c.delta
        else refunded += c.delta
        byDate.get(c.day)!.credits -= c.delta
      }
      const jobsByStatus: Record<string, number> = Object.fromEntries(JOB_STATUSES.map(s => [s, 0]))
      const jobsByModel: Record<string, number> = {}
      for (const j of rows.jobs) {
        jobsByStatus[j.status] = (jobsByStatus[j.status] ?? 0) + j.n
        jobsByModel[j.model] = (jobsByModel[j.model] ?? 0) + j.n
        byDate.get(j.day)!.jobs += j.n
      }
      return {
        headers: { 'Cache-Control': 'no-store' },
        body: {
          from,
          to,
          requests,
          credits_charged: charged,
          credits_refunded: refunded,
          net_credits: charged - refunded,
          jobs_by_status: jobsByStatus,
          jobs_by_model: jobsByModel,
          daily,
        },
      }
    },
  },
  {
    method: 'GET',
    path: '/v1/usage/limits',
    auth: 'key',
    scope: 'read',
    summary: 'Effective tier, rate limit, concurrency cap and jobs in flight, SSE streams, and the key and webhook caps',
    tag: 'Usage',
    schema: { response: { 200: Limits } },
    async handler (ctx) {
      const c = ctx.caller!
      const s = ctx.services
      const [account, counts] = await Promise.all([
        c.kind === 'session' ? s.auth.account(c.accountId) : null,
        limitCounts(s.sql, c.accountId, c.keyId),
      ])
      if (c.kind === 'session' && account === null) throw new ApiError('USER_NOT_FOUND')
      // Limits are those enforced for this credential: a session has its own row in the tier table.
      const lim = s.config.tierLimits[c.tier]
      return {
        headers: { 'Cache-Control': 'no-store' },
        body: {
          tier: account ? tierOf(account) : c.tier,
          rate_limit_rpm: lim.rpm,
          max_concurrent: lim.max_concurrent,
          in_flight: counts.in_flight,
          max_streams: lim.max_streams,
          open_streams: s.sse.openStreams(c.accountId),
          active_keys: counts.active_keys,
          max_active_keys: MAX_ACTIVE_KEYS,
          active_webhooks: counts.active_webhooks,
          max_active_webhooks: MAX_ACTIVE_WEBHOOKS,
        },
      }
    },
  },
]
