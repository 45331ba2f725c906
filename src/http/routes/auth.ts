import { Type, type Static } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import { createAccount, findAccountByEmail, findAccountById, setPassword } from '../../db/accounts.js'
import { signSession } from '../jwt.js'
import type { Route, RouteContext } from '../route.js'
import { NO_STORE } from '../respond.js'
import { recordLoginAttempts, type LoginAttempt } from '../../db/login-attempts.js'

/** Free credits granted at signup (docs/api.md "Jobs"), as a `grant` ledger entry. */
export const SIGNUP_CREDITS = 200

export const Email = Type.String({ format: 'email', minLength: 3, maxLength: 254 })
export const Password = Type.String({ minLength: 8, maxLength: 200 })

const Signup = Type.Object({ email: Email, password: Password })
const Login = Type.Object({ email: Type.String({ minLength: 1, maxLength: 254 }), password: Type.String({ minLength: 1, maxLength: 200 }) })
const ChangePassword = Type.Object({ current_password: Type.String({ minLength: 1, maxLength: 200 }), new_password: Password })
const Token = Type.Object({ token: Type.String(), token_type: Type.Literal('Bearer'), expires_in: Type.Integer() })
const Me = Type.Object({ user_id: Type.Integer(), email: Type.String(), credits: Type.Integer() })

// Verified against when the email is unknown, so a miss costs the same time as a hit.
let dummyHash: Promise<string> | null = null

/** Audit of a failed or throttled login (login_attempts); never delays the answer. */
function auditLogin (ctx: RouteContext, row: LoginAttempt): void {
  recordLoginAttempts(ctx.services.sql, [row]).catch((err: unknown) => ctx.services.log.warn({ err: String(err) }, 'login audit failed'))
}

/** Counts a failure (account and address), audits it, and answers 401. */
async function loginFailed (ctx: RouteContext, email: string, ip: string, accountId: number | null): Promise<never> {
  await ctx.services.loginThrottle.failed(email, ip)
  auditLogin(ctx, { email, accountId, ip, outcome: 'failure' })
  throw new ApiError('INVALID_CREDENTIALS')
}

/** Session routes (docs/api.md "Endpoints") and GET /v1/auth/me (docs/api.md "Accounts, sessions and keys"). */
export const routes: Route[] = [
  {
    method: 'POST',
    path: '/v1/auth/signup',
    auth: 'public',
    summary: 'Create an account (200 free credits, email unverified)',
    tag: 'Sessions',
    errors: ['CONFLICT', 'RATE_LIMIT_EXCEEDED'],
    schema: {
      body: Signup,
      response: {
        201: Type.Object({
          user_id: Type.Integer(),
          email: Type.String(),
          email_verified: Type.Literal(false),
          next: Type.String({ description: 'What to do next: an operator verifies the email, then log in and create an API key' }),
        }),
      },
    },
    async handler (ctx) {
      const b = ctx.body as Static<typeof Signup>
      const s = ctx.services
      // Each account starts with free credits: signups are throttled per client address
      // (docs/operations.md "Hostile input").
      const wait = await s.signupThrottle.take(ctx.ip || 'unknown')
      if (wait > 0) {
        const e = new ApiError('RATE_LIMIT_EXCEEDED', `Too many signups from this address; retry in ${wait} s`, { retry_after: wait })
        e.headers = { 'Retry-After': String(wait) }
        throw e
      }
      const a = await createAccount(s.sql, { email: b.email, passwordHash: await s.passwords.hash(b.password), verified: false, credits: SIGNUP_CREDITS, note: 'signup free credits' })
      if (!a) throw new ApiError('CONFLICT', 'An account with this email already exists', { param: 'email' })
      // An unverified account cannot create keys (403 NOT_ELIGIBLE): say what unblocks it.
      // Read by the person who signed up, not the operator: no operator commands here (docs/operations.md "Operator CLI" has them).
      const next = 'Your email is not verified yet: the service operator verifies it (tell them your user_id). ' +
        'Then log in (POST /v1/auth/login) and create an API key (POST /v1/auth/keys)'
      return { status: 201, body: { user_id: a.id, email: a.email, email_verified: false, next } }
    },
  },
  {
    method: 'POST',
    path: '/v1/auth/login',
    auth: 'public',
    summary: 'Exchange email and password for a session JWT',
    tag: 'Sessions',
    errors: ['INVALID_CREDENTIALS', 'ACCOUNT_BANNED', 'RATE_LIMIT_EXCEEDED'],
    schema: { body: Login, response: { 200: Token } },
    async handler (ctx) {
      const b = ctx.body as Static<typeof Login>
      const s = ctx.services
      // Throttled per account and per client address (src/http/login-throttle.ts).
      const who = b.email.trim().toLowerCase()
      const ip = ctx.ip || 'unknown'
      const wait = await s.loginThrottle.check(who, ip)
      if (wait > 0) {
        auditLogin(ctx, { email: who, accountId: null, ip, outcome: 'throttled' })
        const e = new ApiError('RATE_LIMIT_EXCEEDED', `Too many failed logins; retry in ${wait} s`, { retry_after: wait })
        e.headers = { 'Retry-After': String(wait) }
        throw e
      }
      const a = await findAccountByEmail(s.sql, b.email)
      if (!a) {
        dummyHash ??= s.passwords.hash('not-a-real-password')
        await s.passwords.verify(b.password, await dummyHash)
        return loginFailed(ctx, who, ip, null)
      }
      if (!(await s.passwords.verify(b.password, a.password_hash))) await loginFailed(ctx, who, ip, a.id)
      await s.loginThrottle.succeeded(who)
      // Checked after the password, so a ban is only disclosed to the account's owner.
      if (a.banned) throw new ApiError('ACCOUNT_BANNED', 'This account is suspended; it cannot log in')
      const { token, expires_in } = signSession(s.jwtSecret, a.id)
      return { headers: NO_STORE, body: { token, token_type: 'Bearer', expires_in } }
    },
  },
  {
    method: 'POST',
    path: '/v1/auth/password',
    auth: 'session',
    summary: 'Change the password; every session issued before it stops working (PASSWORD_CHANGED)',
    tag: 'Sessions',
    errors: ['INVALID_CREDENTIALS'],
    schema: { body: ChangePassword, response: { 200: Type.Object({ changed: Type.Literal(true), token: Type.String(), token_type: Type.Literal('Bearer'), expires_in: Type.Integer() }) } },
    async handler (ctx) {
      const b = ctx.body as Static<typeof ChangePassword>
      const s = ctx.services
      const id = ctx.caller!.accountId
      const a = await findAccountById(s.sql, id)
      if (!a) throw new ApiError('USER_NOT_FOUND')
      if (!(await s.passwords.verify(b.current_password, a.password_hash))) throw new ApiError('INVALID_CREDENTIALS', 'current_password is wrong', { param: 'current_password' })
      const now = Date.now()
      await setPassword(s.sql, id, await s.passwords.hash(b.new_password), new Date(now))
      s.auth.invalidateAccount(id)
      // A fresh session issued at the change instant stays valid; older ones do not.
      const { token, expires_in } = signSession(s.jwtSecret, id, now)
      return { headers: NO_STORE, body: { changed: true, token, token_type: 'Bearer', expires_in } }
    },
  },
  {
    method: 'GET',
    path: '/v1/auth/me',
    auth: 'key',
    summary: 'The caller: user id, email and credit balance',
    tag: 'Sessions',
    schema: { response: { 200: Me } },
    async handler (ctx) {
      const v = await ctx.services.shards.ask(ctx.caller!.accountId, { type: 'account.get', accountId: ctx.caller!.accountId })
      return { body: { user_id: v.id, email: v.email, credits: v.credits } }
    },
  },
]
