import { Type } from '@sinclair/typebox'
import { grantedCredits } from '../../db/accounts.js'
import { tierOf } from '../auth.js'
import type { Route } from '../route.js'

const Credits = Type.Object({
  credits: Type.Integer(),
  tier: Type.Union([Type.Literal('free'), Type.Literal('pro'), Type.Literal('enterprise')]),
  has_purchased: Type.Boolean(),
  free_trial: Type.Object({ credits_granted: Type.Integer(), video_used: Type.Boolean() }),
})

/** GET /v1/credits (docs/api.md "Jobs", Credits and the free trial). */
export const routes: Route[] = [
  {
    method: 'GET',
    path: '/v1/credits',
    auth: 'key',
    scope: 'read',
    summary: 'Credit balance, tier and free-trial state',
    tag: 'Credits',
    schema: { response: { 200: Credits } },
    async handler (ctx) {
      const id = ctx.caller!.accountId
      const [v, granted] = await Promise.all([
        ctx.services.shards.ask(id, { type: 'account.get', accountId: id }),
        grantedCredits(ctx.services.sql, id),
      ])
      return {
        body: {
          credits: v.credits,
          tier: tierOf({ enterprise: v.enterprise, hasPurchased: v.has_purchased }),
          has_purchased: v.has_purchased,
          free_trial: { credits_granted: granted, video_used: v.free_videos_used > 0 },
        },
      }
    },
  },
]
