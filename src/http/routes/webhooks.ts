import { randomBytes } from 'node:crypto'
import { Type, type Static } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import { checkWebhookUrl, maskUrlPassword, MAX_URL_LENGTH } from '../../catalog/url.js'
import { isIpLiteral } from '../../net/ip.js'
import { targetVerdict } from '../../net/address-policy.js'
import { REGISTRATION_DNS_TIMEOUT_MS, resolveForRegistration, type LookupAll } from '../../net/dns-guard.js'
import {
  claimForRedelivery, deleteWebhook, getWebhook, insertTestDelivery, insertWebhook, listDeliveries, listWebhooks, MAX_ACTIVE_WEBHOOKS,
  recordManualAttempt, rotateWebhookSecret, type ManualDelivery, type WebhookRow,
} from '../../db/webhooks.js'
import { outcomeOf } from '../../webhooks/delivery.js'
import { CLAIM_LEASE_S } from '../../domain.js'
import { sendNow } from '../../webhooks/delivery-now.js'
import type { Route, RouteContext } from '../route.js'
import { NO_STORE } from '../respond.js'
import { intParam } from '../validate.js'
import { ListOf, page, Paging } from './jobs.js'

const EventType = Type.Union([Type.Literal('job.completed'), Type.Literal('job.failed')])

const CreateWebhook = Type.Object({
  url: Type.String({ format: 'uri', maxLength: MAX_URL_LENGTH, description: 'https and publicly routable' }),
  events: Type.Array(EventType, { minItems: 1, maxItems: 2, uniqueItems: true }),
  secret: Type.Optional(Type.String({ minLength: 16, maxLength: 64, description: 'HMAC key; omitted: 32 random bytes (hex) are generated and returned once' })),
}, { additionalProperties: false })

/** The webhook record of docs/api.md "Webhooks". */
export const WebhookView = Type.Object({
  id: Type.Integer(),
  url: Type.String(),
  events: Type.Array(EventType),
  active: Type.Boolean(),
  created_at: Type.String({ format: 'date-time' }),
})
const WebhookWithSecret = Type.Object({ ...WebhookView.properties, secret: Type.String() })

const Nullable = <T extends ReturnType<typeof Type.String | typeof Type.Integer>>(t: T) => Type.Union([t, Type.Null()])
const DeliveryStatus = Type.Union(['pending', 'delivered', 'failed', 'disabled'].map(s => Type.Literal(s)))
/** A delivery's event: the job events, or `webhook.test` (POST /v1/webhooks/{id}/test). */
const DeliveryEvent = Type.Union([Type.Literal('job.completed'), Type.Literal('job.failed'), Type.Literal('webhook.test')])

/** One delivery of a webhook with its attempts (for debugging a failing receiver; docs/webhook-tools.md). */
export const DeliveryView = Type.Object({
  id: Type.String({ description: 'The X-Service-Delivery header, the same on every attempt' }),
  event: DeliveryEvent,
  event_id: Type.String({ description: 'The body `id` (evt_...)' }),
  job_id: Nullable(Type.String({ description: 'null for a webhook.test event' })),
  status: DeliveryStatus,
  attempts: Type.Integer(),
  last_status_code: Nullable(Type.Integer()),
  last_error: Nullable(Type.String()),
  last_latency_ms: Nullable(Type.Integer()),
  next_attempt_at: Nullable(Type.String({ format: 'date-time', description: 'When pending: the next attempt' })),
  created_at: Type.String({ format: 'date-time' }),
  delivered_at: Nullable(Type.String({ format: 'date-time' })),
  request_body: Type.Unknown({ description: 'The signed JSON body, as sent on every attempt' }),
  attempts_history: Type.Array(Type.Object({
    attempt: Type.Integer(),
    attempted_at: Type.String({ format: 'date-time' }),
    status_code: Nullable(Type.Integer()),
    latency_ms: Nullable(Type.Integer()),
    error: Nullable(Type.String()),
    response_excerpt: Nullable(Type.String({ description: "The receiver's answer: its first 1 KiB for a manual send (test, redeliver); for an automatic attempt the first 200 bytes of a non-2xx answer" })),
    manual: Type.Boolean({ description: 'Sent by POST .../test or .../redeliver rather than by the delivery pool' }),
  })),
})

/** The answer of a manual send (test event, redelivery): what the receiver said, now. */
const SendResult = Type.Object({
  delivery_id: Type.String(),
  event: DeliveryEvent,
  attempt: Type.Integer({ description: 'This attempt\'s number in the delivery\'s history' }),
  delivered: Type.Boolean({ description: 'The receiver answered 2xx' }),
  status: DeliveryStatus,
  status_code: Nullable(Type.Integer()),
  latency_ms: Nullable(Type.Integer()),
  error: Nullable(Type.String()),
  response_excerpt: Nullable(Type.String({ description: "The first 1 KiB of the receiver's answer" })),
  next_attempt_at: Nullable(Type.String({ format: 'date-time', description: 'When still pending: the next automatic attempt' })),
})
const RotateSecret = Type.Object({
  secret: Type.Optional(Type.String({ minLength: 16, maxLength: 64, description: 'The new HMAC key; omitted: 32 random bytes (hex) are generated' })),
}, { additionalProperties: false })
const DeliveryParams = Type.Object({ id: Type.Integer({ minimum: 1 }), deliveryId: Type.String() })

/** From an automatic attempt's last_error `HTTP 500: <snippet>` (src/net/h1-client.ts), the snippet. */
function excerptOfError (statusCode: number | null, error: string | null): string | null {
  if (statusCode === null || error === null || (statusCode >= 300 && statusCode < 400)) return null
  const prefix = `HTTP ${statusCode}: `
  return error.startsWith(prefix) ? error.slice(prefix.length) : null
}

function parsedBody (body: string): unknown {
  try { return JSON.parse(body) } catch { return body }
}

/**
 * Sends `d` now (sendNow: the pool's SSRF rules and signature) and records the attempt. The
 * delivery's state after it: a 2xx delivers, a 410 disables it and the webhook (as the pool
 * does); otherwise a delivery that was pending keeps its retry schedule (or fails when no
 * attempt is left), a test event fails (it is never retried), and a delivery that had already
 * ended keeps its state: a failing redelivery never undoes an earlier success.
 */
async function sendAndRecord (ctx: RouteContext, d: ManualDelivery, test: boolean): Promise<Static<typeof SendResult>> {
  const s = ctx.services
  const attemptedAt = new Date()
  const r = await sendNow(d, { allowlist: s.config.webhookAllowlist, userAgent: `genjobs-webhooks/${s.version}` })
  const attempt = d.attempts + 1
  const o = outcomeOf(r, attempt, { scale: s.config.webhookRetryScale, registered: true })
  let status = o.status
  if (status !== 'delivered' && status !== 'disabled') {
    if (test) status = 'failed'
    else if (d.status !== 'pending') status = d.status
  }
  const delayMs = status === 'pending' ? o.delayMs : null
  await recordManualAttempt(s.sql, {
    deliveryId: d.id, webhookId: d.webhook_id, attempt, attemptedAt, statusCode: r.statusCode, latencyMs: r.latencyMs,
    error: r.error, excerpt: r.excerpt, status, delayMs, disableWebhook: o.disableWebhook,
  })
  return {
    delivery_id: d.id,
    event: d.event as Static<typeof DeliveryEvent>,
    attempt,
    delivered: r.statusCode !== null && r.statusCode >= 200 && r.statusCode < 300,
    status,
    status_code: r.statusCode,
    latency_ms: r.latencyMs,
    error: r.error,
    response_excerpt: r.excerpt,
    next_attempt_at: delayMs !== null ? new Date(Date.now() + delayMs).toISOString() : null,
  }
}

const IdParams = Type.Object({ id: Type.Integer({ minimum: 1 }) })
const DeliveriesQuery = Type.Object({ status: Type.Optional(DeliveryStatus), ...Paging })
const ListQuery = Type.Object({ ...Paging })

function viewOf (w: WebhookRow): Static<typeof WebhookView> {
  return { id: w.id, url: maskUrlPassword(w.url), events: w.events as Array<'job.completed' | 'job.failed'>, active: w.active, created_at: w.created_at.toISOString() }
}

/**
 * The address policy (src/net/address-policy.ts) at registration, for every webhook URL: POST /webhooks `url` and the
 * per-job `webhook_url` of every creation route get exactly these checks. https, not localhost
 * nor a non-public IP literal (422 UNSUPPORTED_OPTION naming `param`); a name is resolved (as
 * the delivery connector resolves it, /etc/hosts included) and refused with 422 if any address
 * is non-public; a name DNS says does not exist is accepted (docs/api.md "Webhooks": the delivery-time
 * check on the connected address is the real guard); a resolver that does not answer within
 * 2 s gives 503 SERVICE_UNAVAILABLE with Retry-After, never an acceptance. An allowlisted
 * host[:port] skips all of it.
 */
export async function checkWebhookDestination (value: string, allowlist: readonly string[], param: string, lookupAll?: LookupAll): Promise<void> {
  checkWebhookUrl(value, { webhookAllowlist: allowlist }, param)
  const url = new URL(value)
  // Passed checkWebhookUrl: allowlisted, a public literal, or a name to resolve.
  if (targetVerdict(url, allowlist) === 'allowlisted' || isIpLiteral(url.hostname)) return
  const r = await resolveForRegistration(url.hostname, lookupAll)
  if (r === 'non-public') {
    throw new ApiError('UNSUPPORTED_OPTION', `${param} must be publicly routable: its host resolves to a non-public address`, { param })
  }
  if (r === 'timeout') {
    const e = new ApiError('SERVICE_UNAVAILABLE', `${param}: the host name ${url.hostname} could not be checked (DNS did not answer within ${REGISTRATION_DNS_TIMEOUT_MS / 1000} s); nothing was created, retry shortly`, { param, retry_after: 2 })
    e.headers = { 'Retry-After': '2' }
    throw e
  }
}

/** Registered webhooks (docs/api.md "Webhooks"), scope generate. */
export const routes: Route[] = [
  {
    method: 'POST',
    path: '/v1/webhooks',
    auth: 'key',
    scope: 'generate',
    summary: 'Register a webhook for job.completed / job.failed; the signing secret is returned once',
    tag: 'Webhooks',
    errors: ['UNSUPPORTED_OPTION', 'WEBHOOK_LIMIT_REACHED'],
    schema: { body: CreateWebhook, response: { 201: WebhookWithSecret } },
    async handler (ctx) {
      const b = ctx.body as Static<typeof CreateWebhook>
      await checkWebhookDestination(b.url, ctx.services.config.webhookAllowlist, 'url')
      const secret = b.secret ?? randomBytes(32).toString('hex')
      const row = await insertWebhook(ctx.services.sql, { accountId: ctx.caller!.accountId, url: b.url, secret, events: b.events })
      if (row === null) throw new ApiError('WEBHOOK_LIMIT_REACHED', `An account can have at most ${MAX_ACTIVE_WEBHOOKS} active webhooks; delete one first`)
      return { status: 201, headers: NO_STORE, body: { ...viewOf(row), secret } }
    },
  },
  {
    method: 'GET',
    path: '/v1/webhooks',
    auth: 'key',
    scope: 'generate',
    summary: 'List the caller\'s webhooks, newest first (secrets are never shown again)',
    tag: 'Webhooks',
    schema: { query: ListQuery, response: { 200: ListOf(WebhookView) } },
    async handler (ctx) {
      const limit = Number(ctx.query.get('limit') ?? 20)
      const offset = Number(ctx.query.get('offset') ?? 0)
      const { rows, total } = await listWebhooks(ctx.services.sql, ctx.caller!.accountId, limit, offset)
      return { body: page(rows.map(viewOf), total, limit, offset) }
    },
  },
  {
    method: 'DELETE',
    path: '/v1/webhooks/:id',
    auth: 'key',
    scope: 'generate',
    summary: 'Delete a webhook; its pending deliveries are not sent',
    tag: 'Webhooks',
    errors: ['INVALID_PARAM', 'WEBHOOK_NOT_FOUND'],
    schema: { params: IdParams, response: { 200: Type.Object({ deleted: Type.Literal(true), id: Type.Integer() }) } },
    async handler (ctx) {
      const id = intParam(ctx.params.id, 'id')
      if (!await deleteWebhook(ctx.services.sql, ctx.caller!.accountId, id)) throw new ApiError('WEBHOOK_NOT_FOUND')
      return { body: { deleted: true, id } }
    },
  },
  {
    method: 'GET',
    path: '/v1/webhooks/:id/deliveries',
    auth: 'key',
    scope: 'generate',
    summary: 'Recent deliveries of a webhook with every attempt (status code, latency, error, next retry)',
    tag: 'Webhooks',
    errors: ['INVALID_PARAM', 'WEBHOOK_NOT_FOUND'],
    schema: { params: IdParams, query: DeliveriesQuery, response: { 200: ListOf(DeliveryView) } },
    async handler (ctx) {
      const id = intParam(ctx.params.id, 'id')
      const sql = ctx.services.sql
      if (!await getWebhook(sql, ctx.caller!.accountId, id)) throw new ApiError('WEBHOOK_NOT_FOUND')
      const limit = Number(ctx.query.get('limit') ?? 20)
      const offset = Number(ctx.query.get('offset') ?? 0)
      const status = ctx.query.get('status') ?? undefined
      const { rows, attempts, total } = await listDeliveries(sql, id, { status, limit, offset })
      const byDelivery = new Map<string, Array<Static<typeof DeliveryView>['attempts_history'][number]>>()
      for (const a of attempts) {
        let list = byDelivery.get(a.delivery_id)
        if (!list) byDelivery.set(a.delivery_id, list = [])
        list.push({
          attempt: a.attempt, attempted_at: a.attempted_at.toISOString(), status_code: a.status_code, latency_ms: a.latency_ms, error: a.error,
          response_excerpt: a.response_excerpt ?? excerptOfError(a.status_code, a.error), manual: a.manual,
        })
      }
      const data = rows.map(r => ({
        id: r.id,
        event: r.event as Static<typeof DeliveryEvent>,
        event_id: r.event_id,
        job_id: r.job_id,
        status: r.status,
        attempts: r.attempts,
        last_status_code: r.last_status_code,
        last_error: r.last_error,
        last_latency_ms: r.last_latency_ms,
        next_attempt_at: r.status === 'pending' ? r.next_attempt_at.toISOString() : null,
        created_at: r.created_at.toISOString(),
        delivered_at: r.delivered_at ? r.delivered_at.toISOString() : null,
        request_body: parsedBody(r.body),
        attempts_history: byDelivery.get(r.id) ?? [],
      }))
      return { body: page(data, total, limit, offset) }
    },
  },
  {
    method: 'POST',
    path: '/v1/webhooks/:id/test',
    auth: 'key',
    scope: 'generate',
    summary: 'Send a signed webhook.test event to the webhook now and answer what the receiver said (status code, latency, response excerpt); it is listed with the deliveries',
    tag: 'Webhooks',
    errors: ['INVALID_PARAM', 'WEBHOOK_NOT_FOUND'],
    schema: { params: IdParams, response: { 200: SendResult } },
    async handler (ctx) {
      const id = intParam(ctx.params.id, 'id')
      const s = ctx.services
      const hook = await getWebhook(s.sql, ctx.caller!.accountId, id)
      if (!hook) throw new ApiError('WEBHOOK_NOT_FOUND')
      const eventId = `evt_${randomBytes(12).toString('base64url')}`
      const at = new Date()
      const body = JSON.stringify({
        id: eventId,
        type: 'webhook.test',
        created_at: at.toISOString(),
        data: { webhook: { id: hook.id, url: maskUrlPassword(hook.url) }, message: 'A test event sent from the genjobs API; no job is involved.' },
      })
      const d = await insertTestDelivery(s.sql, {
        id: `dlv_${randomBytes(12).toString('base64url')}`, eventId, accountId: hook.account_id, webhookId: hook.id,
        url: hook.url, secret: hook.secret, body, leaseSeconds: CLAIM_LEASE_S,
      })
      return { body: await sendAndRecord(ctx, d, true) }
    },
  },
  {
    method: 'POST',
    path: '/v1/webhooks/:id/deliveries/:deliveryId/redeliver',
    auth: 'key',
    scope: 'generate',
    summary: 'Send one delivery again now (same body and X-Service-Delivery, freshly signed, to the webhook\'s current URL) and answer what the receiver said',
    tag: 'Webhooks',
    errors: ['INVALID_PARAM', 'WEBHOOK_NOT_FOUND', 'NOT_FOUND', 'CONFLICT'],
    schema: { params: DeliveryParams, response: { 200: SendResult } },
    async handler (ctx) {
      const id = intParam(ctx.params.id, 'id')
      const s = ctx.services
      if (!await getWebhook(s.sql, ctx.caller!.accountId, id)) throw new ApiError('WEBHOOK_NOT_FOUND')
      const deliveryId = ctx.params.deliveryId
      const d = /^dlv_[A-Za-z0-9_-]{1,64}$/.test(deliveryId) ? await claimForRedelivery(s.sql, id, deliveryId, CLAIM_LEASE_S) : undefined
      if (d === undefined) throw new ApiError('NOT_FOUND', `No delivery ${deliveryId.slice(0, 80)} of webhook ${id}`, { param: 'deliveryId' })
      if (d === 'busy') {
        const e = new ApiError('CONFLICT', 'An automatic attempt of this delivery is in flight; retry in a few seconds', { retry_after: 5 })
        e.headers = { 'Retry-After': '5' }
        throw e
      }
      return { body: await sendAndRecord(ctx, d, false) }
    },
  },
  {
    method: 'POST',
    path: '/v1/webhooks/:id/rotate-secret',
    auth: 'key',
    scope: 'generate',
    summary: 'Replace the signing secret; the new one is returned once. Pending retries are signed with it from now on',
    tag: 'Webhooks',
    errors: ['INVALID_PARAM', 'WEBHOOK_NOT_FOUND'],
    schema: { params: IdParams, body: RotateSecret, response: { 200: WebhookWithSecret } },
    async handler (ctx) {
      const id = intParam(ctx.params.id, 'id')
      const b = ctx.body as Static<typeof RotateSecret>
      const secret = b.secret ?? randomBytes(32).toString('hex')
      const row = await rotateWebhookSecret(ctx.services.sql, ctx.caller!.accountId, id, secret)
      if (!row) throw new ApiError('WEBHOOK_NOT_FOUND')
      return { headers: NO_STORE, body: { ...viewOf(row), secret } }
    },
  },
]
