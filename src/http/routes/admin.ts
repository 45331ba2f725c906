import { Type, type Static } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import { createAccount, ledgerTotals, updateFlags } from '../../db/accounts.js'
import { accountExists, insertAsset, listAccounts } from '../../db/admin.js'
import { countActiveKeys } from '../../db/keys.js'
import { listFailingDeliveries } from '../../db/webhooks.js'
import { maskUrlPassword } from '../../catalog/url.js'
import { nodeRouteStates } from '../../shard/shard-pool.js'
import { tierOf } from '../auth.js'
import type { Route, RouteContext } from '../route.js'
import { intParam } from '../validate.js'
import { Email, Password } from './auth.js'
import { ListOf, page, Paging } from './jobs.js'

const CreateAccount = Type.Object({
  email: Email,
  password: Password,
  verified: Type.Optional(Type.Boolean()),
  credits: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000_000 })),
})
const Purchase = Type.Object({
  credits: Type.Integer({ minimum: 1, maximum: 1_000_000_000 }),
  currency: Type.Optional(Type.String({ minLength: 3, maxLength: 3 })),
  amount: Type.Optional(Type.Number({ minimum: 0 })),
})
const Grant = Type.Object({ credits: Type.Integer({ minimum: 1, maximum: 1_000_000_000 }), note: Type.Optional(Type.String({ maxLength: 200 })) })
// Closed: an unknown (or misspelt) flag is a 400, never silently ignored or written.
const Patch = Type.Object({
  banned: Type.Optional(Type.Boolean()),
  email_verified: Type.Optional(Type.Boolean()),
  credits_locked: Type.Optional(Type.Boolean()),
  enterprise: Type.Optional(Type.Boolean()),
}, { additionalProperties: false })
const Asset = Type.Object({ kind: Type.Union([Type.Literal('character'), Type.Literal('voice')]), name: Type.String({ minLength: 1, maxLength: 100 }) })

export const AdminAccount = Type.Object({
  user_id: Type.Integer(),
  email: Type.String(),
  credits: Type.Integer(),
  tier: Type.String(),
  has_purchased: Type.Boolean(),
  enterprise: Type.Boolean(),
  banned: Type.Boolean(),
  email_verified: Type.Boolean(),
  credits_locked: Type.Boolean(),
  active_keys: Type.Integer(),
  ledger: Type.Object({ entries: Type.Integer(), sum: Type.Integer(), by_kind: Type.Record(Type.String(), Type.Integer()) }),
})
const AccountSummary = Type.Object({
  user_id: Type.Integer(),
  email: Type.String(),
  credits: Type.Integer(),
  tier: Type.String(),
  email_verified: Type.Boolean(),
  banned: Type.Boolean(),
  credits_locked: Type.Boolean(),
  has_purchased: Type.Boolean(),
  enterprise: Type.Boolean(),
  created_at: Type.String({ format: 'date-time' }),
})
const AccountsQuery = Type.Object({ q: Type.Optional(Type.String({ minLength: 1, maxLength: 254 })), ...Paging })
const IdParams = Type.Object({ id: Type.Integer({ minimum: 1 }) })

async function accountId (ctx: RouteContext): Promise<number> {
  const id = intParam(ctx.params.id, 'id')
  if (!(await accountExists(ctx.services.sql, id))) throw new ApiError('NOT_FOUND', `No account ${id}`)
  return id
}

/** The operator's view of an account: balance from its actor, totals from the ledger. */
export async function adminView (ctx: RouteContext, id: number): Promise<Static<typeof AdminAccount>> {
  const s = ctx.services
  const [v, ledger, active] = await Promise.all([
    s.shards.ask(id, { type: 'account.get', accountId: id }),
    ledgerTotals(s.sql, id),
    countActiveKeys(s.sql, id),
  ])
  return {
    user_id: v.id,
    email: v.email,
    credits: v.credits,
    tier: tierOf({ enterprise: v.enterprise, hasPurchased: v.has_purchased }),
    has_purchased: v.has_purchased,
    enterprise: v.enterprise,
    banned: v.banned,
    email_verified: v.email_verified,
    credits_locked: v.credits_locked,
    active_keys: active,
    ledger,
  }
}

/** One route of PROVIDERS_FILE as this node runs it (src/shard/shard-pool.ts `nodeRouteStates`). */
const RouteView = Type.Object({
  model: Type.String({ description: 'Catalogue model id' }),
  route: Type.String({ description: 'model#index:provider:upstream model (stored with each job)' }),
  provider: Type.String(),
  upstream_model: Type.String(),
  breaker: Type.Union([Type.Literal('open'), Type.Literal('closed')], { description: 'open on any shard: the route is skipped until its cool-down ends' }),
  in_flight: Type.Integer({ description: 'Jobs the provider holds on this route (this node)' }),
  queued: Type.Integer({ description: 'Charged jobs waiting for room on this route (this node)' }),
  max_concurrent: Type.Union([Type.Integer(), Type.Null()]),
})
const ProvidersView = Type.Object({
  providers: Type.Array(RouteView, { description: 'Each route of PROVIDERS_FILE in order (empty: every model on the simulated provider)' }),
})

const Nullable = <T extends ReturnType<typeof Type.String | typeof Type.Integer>>(t: T) => Type.Union([t, Type.Null()])
const FailingQuery = Type.Object({
  status: Type.Optional(Type.Union([Type.Literal('failed'), Type.Literal('retrying'), Type.Literal('both')], { default: 'both', description: 'failed: no attempt left; retrying: pending after at least one failed attempt' })),
  ...Paging,
})
const FailingDelivery = Type.Object({
  id: Type.String(),
  account_id: Type.Integer(),
  webhook_id: Nullable(Type.Integer({ description: 'null for a per-job webhook_url' })),
  job_id: Nullable(Type.String()),
  event: Type.String(),
  url: Type.String({ description: 'A password in the URL is shown as ****' }),
  status: Type.String(),
  attempts: Type.Integer(),
  last_status_code: Nullable(Type.Integer()),
  last_error: Nullable(Type.String()),
  next_attempt_at: Nullable(Type.String({ format: 'date-time' })),
  created_at: Type.String({ format: 'date-time' }),
})

/** Operator API (docs/api.md "Endpoints", operator routes): Authorization: Bearer <ADMIN_TOKEN>. */
export const routes: Route[] = [
  {
    method: 'GET',
    path: '/v1/admin/providers',
    auth: 'admin',
    summary: 'The routes of PROVIDERS_FILE on this node: provider, upstream model, breaker, in flight, queued, cap (not in the public health)',
    tag: 'Operator',
    schema: { response: { 200: ProvidersView } },
    async handler (ctx) {
      const s = ctx.services
      return { headers: { 'Cache-Control': 'no-store' }, body: { providers: await nodeRouteStates(s.shards, s.config.providersFile) } }
    },
  },
  {
    method: 'GET',
    path: '/v1/admin/deliveries',
    auth: 'admin',
    summary: 'Failing webhook deliveries of every account, newest first: failed for good, or retrying after a failed attempt',
    tag: 'Operator',
    schema: { query: FailingQuery, response: { 200: ListOf(FailingDelivery) } },
    async handler (ctx) {
      const q = Object.fromEntries(ctx.query) as unknown as Static<typeof FailingQuery>
      const limit = Number(q.limit ?? 20)
      const offset = Number(q.offset ?? 0)
      const { rows, total } = await listFailingDeliveries(ctx.services.sql, { which: q.status ?? 'both', limit, offset })
      return {
        headers: { 'Cache-Control': 'no-store' },
        body: page(rows.map(r => ({
          id: r.id,
          account_id: r.account_id,
          webhook_id: r.webhook_id,
          job_id: r.job_id,
          event: r.event,
          url: maskUrlPassword(r.url),
          status: r.status,
          attempts: r.attempts,
          last_status_code: r.last_status_code,
          last_error: r.last_error,
          next_attempt_at: r.status === 'pending' ? r.next_attempt_at.toISOString() : null,
          created_at: r.created_at.toISOString(),
        })), total, limit, offset),
      }
    },
  },
  {
    method: 'POST',
    path: '/v1/admin/accounts',
    auth: 'admin',
    summary: 'Create an account (credits default 200, as a grant)',
    tag: 'Operator',
    errors: ['CONFLICT'],
    schema: { body: CreateAccount, response: { 201: Type.Object({ user_id: Type.Integer(), email: Type.String(), credits: Type.Integer() }) } },
    async handler (ctx) {
      const b = ctx.body as Static<typeof CreateAccount>
      const s = ctx.services
      const a = await createAccount(s.sql, { email: b.email, passwordHash: await s.passwords.hash(b.password), verified: b.verified ?? false, credits: b.credits ?? 200, note: 'operator account creation' })
      if (!a) throw new ApiError('CONFLICT', 'An account with this email already exists', { param: 'email' })
      return { status: 201, body: { user_id: a.id, email: a.email, credits: a.credits } }
    },
  },
  {
    method: 'GET',
    path: '/v1/admin/accounts',
    auth: 'admin',
    summary: 'List accounts, newest first; q filters by part of the email',
    tag: 'Operator',
    schema: { query: AccountsQuery, response: { 200: ListOf(AccountSummary) } },
    async handler (ctx) {
      const q = Object.fromEntries(ctx.query) as unknown as Static<typeof AccountsQuery>
      const limit = Number(q.limit ?? 20)
      const offset = Number(q.offset ?? 0)
      const { rows, total } = await listAccounts(ctx.services.sql, { q: q.q, limit, offset })
      return {
        headers: { 'Cache-Control': 'no-store' },
        body: page(rows.map(r => ({
          user_id: r.id,
          email: r.email,
          credits: r.credits,
          tier: tierOf({ enterprise: r.enterprise, hasPurchased: r.has_purchased }),
          email_verified: r.email_verified,
          banned: r.banned,
          credits_locked: r.credits_locked,
          has_purchased: r.has_purchased,
          enterprise: r.enterprise,
          created_at: r.created_at.toISOString(),
        })), total, limit, offset),
      }
    },
  },
  {
    method: 'GET',
    path: '/v1/admin/accounts/:id',
    auth: 'admin',
    summary: 'Account with balance and ledger totals',
    tag: 'Operator',
    errors: ['INVALID_PARAM', 'NOT_FOUND'],
    schema: { params: IdParams, response: { 200: AdminAccount } },
    async handler (ctx) {
      return { body: await adminView(ctx, await accountId(ctx)) }
    },
  },
  {
    method: 'POST',
    path: '/v1/admin/accounts/:id/purchases',
    auth: 'admin',
    summary: 'Record a purchase: adds credits and upgrades the account\'s keys to pro on next use',
    tag: 'Operator',
    errors: ['INVALID_PARAM', 'NOT_FOUND'],
    schema: { params: IdParams, body: Purchase, response: { 201: AdminAccount } },
    async handler (ctx) {
      const id = await accountId(ctx)
      const b = ctx.body as Static<typeof Purchase>
      await ctx.services.shards.ask(id, { type: 'account.credit', accountId: id, credits: b.credits, kind: 'purchase', note: 'purchase', currency: b.currency?.toUpperCase(), amount: b.amount })
      ctx.services.auth.invalidateAccount(id)
      return { status: 201, body: await adminView(ctx, id) }
    },
  },
  {
    method: 'POST',
    path: '/v1/admin/accounts/:id/grants',
    auth: 'admin',
    summary: 'Grant credits (no tier change)',
    tag: 'Operator',
    errors: ['INVALID_PARAM', 'NOT_FOUND'],
    schema: { params: IdParams, body: Grant, response: { 201: AdminAccount } },
    async handler (ctx) {
      const id = await accountId(ctx)
      const b = ctx.body as Static<typeof Grant>
      await ctx.services.shards.ask(id, { type: 'account.credit', accountId: id, credits: b.credits, kind: 'grant', note: b.note ?? 'operator grant' })
      return { status: 201, body: await adminView(ctx, id) }
    },
  },
  {
    method: 'PATCH',
    path: '/v1/admin/accounts/:id',
    auth: 'admin',
    summary: 'Set account flags: banned, email_verified, credits_locked, enterprise',
    tag: 'Operator',
    errors: ['INVALID_PARAM', 'NOT_FOUND'],
    schema: { params: IdParams, body: Patch, response: { 200: AdminAccount } },
    async handler (ctx) {
      const id = intParam(ctx.params.id, 'id')
      const ok = await updateFlags(ctx.services.sql, id, ctx.body as Static<typeof Patch>)
      if (!ok) throw new ApiError('NOT_FOUND', `No account ${id}`)
      ctx.services.auth.invalidateAccount(id)
      await ctx.services.shards.ask(id, { type: 'account.reload', accountId: id })
      return { body: await adminView(ctx, id) }
    },
  },
  {
    method: 'POST',
    path: '/v1/admin/accounts/:id/assets',
    auth: 'admin',
    summary: 'Create a character or voice asset for gemini-omni',
    tag: 'Operator',
    errors: ['INVALID_PARAM', 'NOT_FOUND'],
    schema: {
      params: IdParams,
      body: Asset,
      response: { 201: Type.Object({ id: Type.Integer(), kind: Type.String(), name: Type.String(), created_at: Type.String({ format: 'date-time' }) }) },
    },
    async handler (ctx) {
      const id = await accountId(ctx)
      const b = ctx.body as Static<typeof Asset>
      const a = await insertAsset(ctx.services.sql, id, b.kind, b.name)
      return { status: 201, body: { id: a.id, kind: a.kind, name: a.name, created_at: a.created_at.toISOString() } }
    },
  },
]
