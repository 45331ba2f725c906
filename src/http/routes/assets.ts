import { Type, type Static } from '@sinclair/typebox'
import { listAssets } from '../../db/assets.js'
import type { Route } from '../route.js'
import { ListOf, page, Paging } from './jobs.js'

/** An asset as the API shows it (docs/api.md "Jobs", Library): a character or voice usable by gemini-omni. */
export const Asset = Type.Object({
  id: Type.Integer({ description: 'Pass in character_asset_ids / voice_asset_ids of a gemini-omni request' }),
  kind: Type.Union([Type.Literal('character'), Type.Literal('voice')]),
  name: Type.String(),
  created_at: Type.String({ format: 'date-time' }),
})

const AssetsQuery = Type.Object({
  kind: Type.Optional(Type.Union([Type.Literal('character'), Type.Literal('voice')])),
  ...Paging,
})

/** GET /v1/assets (docs/api.md "Jobs", in the list envelope), scope read. */
export const routes: Route[] = [
  {
    method: 'GET',
    path: '/v1/assets',
    auth: 'key',
    scope: 'read',
    summary: 'List the caller\'s characters and voices for gemini-omni, newest first; filter kind',
    tag: 'Assets',
    schema: { query: AssetsQuery, response: { 200: ListOf(Asset) } },
    async handler (ctx) {
      const q = Object.fromEntries(ctx.query) as unknown as Static<typeof AssetsQuery>
      const limit = Number(q.limit ?? 20)
      const offset = Number(q.offset ?? 0)
      const { rows, total } = await listAssets(ctx.services.sql, ctx.caller!.accountId, { kind: q.kind, limit, offset })
      const data = rows.map(r => ({ id: r.id, kind: r.kind, name: r.name, created_at: r.created_at.toISOString() }))
      return { body: page(data, total, limit, offset) }
    },
  },
]
