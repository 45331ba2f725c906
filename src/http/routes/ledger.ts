import { Type, type Static } from '@sinclair/typebox'
import { listLedger } from '../../db/ledger.js'
import type { Route } from '../route.js'
import { ListOf, page, Paging } from './jobs.js'

const KINDS = ['grant', 'purchase', 'charge', 'refund', 'adjustment']

/** One credit ledger entry: `delta` is negative for charges, positive for everything else. */
export const LedgerEntry = Type.Object({
  id: Type.Integer(),
  kind: Type.Union(KINDS.map(k => Type.Literal(k))),
  delta: Type.Integer(),
  job_id: Type.Union([Type.String(), Type.Null()]),
  note: Type.Union([Type.String(), Type.Null()]),
  created_at: Type.String({ format: 'date-time' }),
})

const LedgerQuery = Type.Object({
  kind: Type.Optional(Type.Union(KINDS.map(k => Type.Literal(k)))),
  job_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
  ...Paging,
})

/** GET /v1/credits/ledger: the caller's credit entries, list envelope of docs/api.md "Jobs", scope read. */
export const routes: Route[] = [
  {
    method: 'GET',
    path: '/v1/credits/ledger',
    auth: 'key',
    scope: 'read',
    summary: 'The caller\'s credit ledger, newest first: charges, refunds, purchases and grants with the job each belongs to; filters kind, job_id',
    tag: 'Credits',
    schema: { query: LedgerQuery, response: { 200: ListOf(LedgerEntry) } },
    async handler (ctx) {
      const q = Object.fromEntries(ctx.query) as unknown as Static<typeof LedgerQuery>
      const limit = Number(q.limit ?? 20)
      const offset = Number(q.offset ?? 0)
      const { rows, total } = await listLedger(ctx.services.sql, ctx.caller!.accountId, { kind: q.kind, jobId: q.job_id, limit, offset })
      return {
        headers: { 'Cache-Control': 'no-store' },
        body: page(rows.map(r => ({
          id: r.id, kind: r.kind, delta: r.delta, job_id: r.job_id, note: r.note, created_at: r.created_at.toISOString()
        })), total, limit, offset),
      }
    },
  },
]
