import { Type, type Static } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import { insertKey, listKeys, revokeKey, rotateKey, type KeyRow } from '../../db/keys.js'
import { generateKey } from '../api-key.js'
import { tierOf, type AccountFlags } from '../auth.js'
import type { Route, RouteContext } from '../route.js'
import { NO_STORE } from '../respond.js'
import { intParam } from '../validate.js'

const CreateKey = Type.Object({
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
  expires_in_days: Type.Optional(Type.Integer({ minimum: 1, maximum: 3650 })),
})

const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()])
const Tier = Type.Union([Type.Literal('free'), Type.Literal('pro'), Type.Literal('enterprise')])
const Scopes = Type.Array(Type.Union([Type.Literal('generate'), Type.Literal('read')]))

/** docs/api.md "Accounts, sessions and keys" */
export const ApiKeyView = Type.Object({
  id: Type.Integer(),
  prefix: Type.String(),
  name: Nullable(Type.String()),
  tier: Tier,
  scopes: Scopes,
  rate_limit_rpm: Type.Integer(),
  last_used_at: Nullable(Type.String({ format: 'date-time' })),
  expires_at: Nullable(Type.String({ format: 'date-time' })),
  created_at: Type.String({ format: 'date-time' }),
})

/** docs/api.md "Accounts, sessions and keys" */
export const ApiKeyWithSecret = Type.Object({
  id: Type.Integer(),
  key: Type.String({ minLength: 71, maxLength: 71 }),
  prefix: Type.String(),
  name: Nullable(Type.String()),
  tier: Tier,
  scopes: Scopes,
  expires_at: Nullable(Type.String({ format: 'date-time' })),
  message: Type.String(),
})

const KeyIdParams = Type.Object({ keyId: Type.Integer({ minimum: 1 }) })

async function accountOf (ctx: RouteContext): Promise<AccountFlags> {
  const a = await ctx.services.auth.account(ctx.caller!.accountId)
  if (!a) throw new ApiError('USER_NOT_FOUND')
  return a
}

function withSecret (row: KeyRow, key: string, a: AccountFlags, message: string): Static<typeof ApiKeyWithSecret> {
  return {
    id: row.id,
    key,
    prefix: row.prefix,
    name: row.name,
    tier: tierOf(a),
    scopes: row.scopes as Array<'generate' | 'read'>,
    expires_at: row.expires_at ? row.expires_at.toISOString() : null,
    message,
  }
}

/**
 * A key is created (or given a new secret) only for a verified, unbanned account whose credits
 * are not locked (docs/api.md "Accounts, sessions and keys"); otherwise 403 NOT_ELIGIBLE with every reason.
 */
function mayHoldKeys (a: AccountFlags, what: 'create' | 'rotate'): void {
  const reasons: string[] = []
  if (!a.emailVerified) reasons.push('email_unverified')
  if (a.banned) reasons.push('account_banned')
  if (a.creditsLocked) reasons.push('credits_locked')
  if (reasons.length > 0) {
    throw new ApiError('NOT_ELIGIBLE', `This account cannot ${what} API keys: ${reasons.join(', ')}`, { reason: reasons[0], reasons })
  }
}

/** API key management (docs/api.md "Accounts, sessions and keys"): dashboard session only; an API key gets 403 insufficient_scope. */
export const routes: Route[] = [
  {
    method: 'POST',
    path: '/v1/auth/keys',
    auth: 'session',
    summary: 'Create an API key; the secret is returned once',
    tag: 'API keys',
    errors: ['NOT_ELIGIBLE', 'KEY_LIMIT_REACHED'],
    schema: { body: CreateKey, response: { 201: ApiKeyWithSecret } },
    async handler (ctx) {
      const b = ctx.body as Static<typeof CreateKey>
      const a = await accountOf(ctx)
      mayHoldKeys(a, 'create')
      const k = generateKey()
      const expiresAt = b.expires_in_days !== undefined ? new Date(Date.now() + b.expires_in_days * 86400_000) : null
      const row = await insertKey(ctx.services.sql, { accountId: a.id, hash: k.hash, prefix: k.prefix, name: b.name ?? null, expiresAt })
      if (row === null) throw new ApiError('KEY_LIMIT_REACHED', 'An account can have at most 5 active API keys; revoke one first')
      return { status: 201, headers: NO_STORE, body: withSecret(row, k.key, a, 'Store this key now: it is shown only once.') }
    },
  },
  {
    method: 'GET',
    path: '/v1/auth/keys',
    auth: 'session',
    summary: 'List active API keys (masked)',
    tag: 'API keys',
    schema: { response: { 200: Type.Object({ keys: Type.Array(ApiKeyView), total: Type.Integer() }) } },
    async handler (ctx) {
      const a = await accountOf(ctx)
      const tier = tierOf(a)
      const rpm = ctx.services.config.tierLimits[tier].rpm
      const rows = await listKeys(ctx.services.sql, a.id)
      const keys = rows.map(r => ({
        id: r.id,
        prefix: r.prefix,
        name: r.name,
        tier,
        scopes: r.scopes,
        rate_limit_rpm: rpm,
        last_used_at: lastUsed(ctx, r),
        expires_at: r.expires_at ? r.expires_at.toISOString() : null,
        created_at: r.created_at.toISOString(),
      }))
      return { body: { keys, total: keys.length } }
    },
  },
  {
    method: 'POST',
    path: '/v1/auth/keys/:keyId/rotate',
    auth: 'session',
    summary: 'Rotate a key: a new secret is returned once and the old one stops working at once',
    tag: 'API keys',
    errors: ['INVALID_PARAM', 'NOT_ELIGIBLE', 'KEY_NOT_FOUND', 'KEY_REVOKED'],
    schema: { params: KeyIdParams, response: { 200: ApiKeyWithSecret } },
    async handler (ctx) {
      const id = intParam(ctx.params.keyId, 'keyId')
      const a = await accountOf(ctx)
      // A new secret is a new credential: the account must be one that may create keys.
      mayHoldKeys(a, 'rotate')
      const k = generateKey()
      const r = await rotateKey(ctx.services.sql, a.id, id, k.hash, k.prefix)
      if (r === 'not_found') throw new ApiError('KEY_NOT_FOUND')
      if (r === 'revoked') throw new ApiError('KEY_REVOKED')
      ctx.services.auth.invalidateKey(r.oldHash)
      return { headers: NO_STORE, body: withSecret(r.row, k.key, a, 'Key rotated: the previous secret no longer works. Store this one now: it is shown only once.') }
    },
  },
  {
    method: 'DELETE',
    path: '/v1/auth/keys/:keyId',
    auth: 'session',
    summary: 'Revoke a key (soft, immediate, irreversible)',
    tag: 'API keys',
    errors: ['INVALID_PARAM', 'KEY_NOT_FOUND'],
    schema: { params: KeyIdParams, response: { 200: Type.Object({ revoked: Type.Literal(true), id: Type.Integer() }) } },
    async handler (ctx) {
      const id = intParam(ctx.params.keyId, 'keyId')
      const hash = await revokeKey(ctx.services.sql, ctx.caller!.accountId, id)
      if (hash === null) throw new ApiError('KEY_NOT_FOUND')
      ctx.services.auth.invalidateKey(hash)
      return { body: { revoked: true, id } }
    },
  },
]

/** last_used_at: the newer of the stored time and the not-yet-flushed in-memory one. */
function lastUsed (ctx: RouteContext, r: KeyRow): string | null {
  const pending = ctx.services.auth.lastUsed.get(r.id)
  const stored = r.last_used_at ? r.last_used_at.getTime() : 0
  const t = Math.max(pending ?? 0, stored)
  return t > 0 ? new Date(t).toISOString() : null
}
