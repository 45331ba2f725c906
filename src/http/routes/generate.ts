import { createHash, randomBytes } from 'node:crypto'
import { Type, type TSchema } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import {
  AudioRequest, BatchRequest, checkIdempotencyKey, CreatedJob, ExtendRequest, ImageRequest, isExtendableModel,
  stableStringify, validateAudio, validateBatch, validateExtend, validateImage, validateVideo, VideoRequest,
  type NormalizedRequest, type ValidateOptions,
} from '../../catalog/index.js'
import { ownedAssetIds } from '../../db/assets.js'
import { findBatch, getJob } from '../../db/jobs.js'
import { JOB_ID_RE } from '../../jobs/view.js'
import { orderOf, specOf } from '../../jobs/spec.js'
import { screenText } from '../../moderation.js'
import type { BatchItemView, JobCaller, JobOrder, JobSpec } from '../../domain.js'
import type { ShardMsg } from '../../shard/protocol.js'
import { PRICING_URL } from '../../catalog/pricing.js'
import type { Route, RouteContext } from '../route.js'
import { ErrorEnvelope } from '../openapi.js'
import { NO_STORE } from '../respond.js'
import { checkWebhookDestination } from './webhooks.js'

const IDEMPOTENCY_HEADER = {
  name: 'Idempotency-Key',
  in: 'header',
  required: false,
  description: 'Replays the original job (HTTP 200, replayed: true) without a new charge. 1-200 characters of A-Z a-z 0-9 _ . -',
  schema: { type: 'string', pattern: '^[A-Za-z0-9_.-]{1,200}$' },
}

const CREATE_ERRORS = [
  'INVALID_IDEMPOTENCY_KEY', 'UNSUPPORTED_OPTION', 'INSUFFICIENT_CREDITS', 'upgrade_required', 'NOT_ELIGIBLE',
  'CONTENT_POLICY_VIOLATION', 'concurrency_limit_reached', 'IDEMPOTENCY_CONFLICT', 'PROVIDER_ERROR', 'GATEWAY_TIMEOUT',
]

function policy (ctx: RouteContext): ValidateOptions {
  return { webhookAllowlist: ctx.services.config.webhookAllowlist, publicBaseUrl: ctx.services.config.publicBaseUrl }
}

/** The caller's identity and concurrency cap as the shard needs them. */
export function jobCaller (ctx: RouteContext): JobCaller {
  const c = ctx.caller!
  const limits = ctx.services.config.tierLimits
  return { accountId: c.accountId, keyId: c.keyId, maxConcurrent: limits[c.tier].max_concurrent }
}

/** SHA-256 of route + canonical body: same key with a different body is IDEMPOTENCY_CONFLICT. */
function fingerprint (ctx: RouteContext): string {
  return createHash('sha256').update(ctx.path).update('\n').update(stableStringify(ctx.body ?? null)).digest('base64url')
}

/**
 * The content screen (docs/api.md "Errors" CONTENT_POLICY_VIOLATION): every text a job carries. A hit is
 * counted on the account; POLICY_VIOLATION_LIMIT hits suspend it (ACCOUNT_BANNED).
 */
async function screen (ctx: RouteContext, spec: JobSpec): Promise<void> {
  const term = screenText(spec.directiveText, ctx.services.config.moderationTerms)
  if (term === null) return
  const id = ctx.caller!.accountId
  const r = await ctx.services.shards.ask(id, { type: 'account.violation', accountId: id })
  if (r.banned) ctx.services.auth.invalidateAccount(id)
  throw new ApiError('CONTENT_POLICY_VIOLATION', r.banned
    ? 'The request failed the content screen; repeated violations have suspended this account'
    : 'The request failed the content screen; nothing was charged. Repeated violations suspend the account', { violations: r.violations })
}

/** gemini-omni asset ids must be the caller's characters and voices (GET /v1/assets). */
async function checkAssets (ctx: RouteContext, n: NormalizedRequest): Promise<void> {
  if (n.kind !== 'video') return
  const wanted: Array<[number[], 'character' | 'voice', string]> = [[n.character_asset_ids, 'character', 'character_asset_ids'], [n.voice_asset_ids, 'voice', 'voice_asset_ids']]
  for (const [ids, kind, param] of wanted) {
    if (ids.length === 0) continue
    const have = await ownedAssetIds(ctx.services.sql, ctx.caller!.accountId, kind, ids)
    const missing = ids.filter(i => !have.has(i))
    if (missing.length) throw new ApiError('UNSUPPORTED_OPTION', `${param}: no ${kind} asset ${missing.join(', ')} belongs to this account (see GET /v1/assets)`, { param })
  }
}

/** extend: the caller's completed veo3-fast / veo3-quality job (docs/api.md "Jobs"). */
async function extendSource (ctx: RouteContext, jobId: string): Promise<string> {
  if (!JOB_ID_RE.test(jobId)) throw new ApiError('JOB_NOT_FOUND', `No job ${jobId} belongs to this account`)
  const row = await getJob(ctx.services.sql, jobId)
  if (!row || row.account_id !== ctx.caller!.accountId) throw new ApiError('JOB_NOT_FOUND', `No job ${jobId} belongs to this account`)
  if (!(row.type === 'video' || row.type === 'extend') || !isExtendableModel(row.model)) {
    throw new ApiError('UNSUPPORTED_OPTION', `Job ${jobId} is a ${row.model} ${row.type} job; only veo3-fast and veo3-quality videos can be extended`, { param: 'job_id' })
  }
  if (row.status !== 'completed') {
    throw new ApiError('UNSUPPORTED_OPTION', `Job ${jobId} is ${row.status}; only completed videos can be extended`, { param: 'job_id' })
  }
  return row.model
}

async function specFor (ctx: RouteContext, n: NormalizedRequest, o: { screen: boolean } = { screen: true }): Promise<JobSpec> {
  await checkAssets(ctx, n)
  // Every delivery is signed (docs/api.md "Webhooks"): a per-job webhook_url sent without a secret gets
  // one generated, returned once in the 201 as `webhook_secret`.
  if (n.webhook_url !== null && n.webhook_secret === null) n.webhook_secret = randomBytes(32).toString('hex')
  // One URL policy for every webhook URL: the same checks as POST /webhooks.
  if (n.webhook_url !== null) await checkWebhookDestination(n.webhook_url, ctx.services.config.webhookAllowlist, 'webhook_url')
  const spec = n.kind === 'extend' ? specOf(n, await extendSource(ctx, n.job_id)) : specOf(n)
  if (o.screen) await screen(ctx, spec)
  return spec
}

async function create (ctx: RouteContext, validate: (body: unknown, o: ValidateOptions) => NormalizedRequest) {
  const idempotencyKey = checkIdempotencyKey(ctx.headers['idempotency-key'])
  const spec = await specFor(ctx, validate(ctx.body ?? {}, policy(ctx)))
  // Without an Idempotency-Key the message carries no key fields at all (each crosses the thread).
  const msg: ShardMsg & { type: 'job.create' } = { type: 'job.create', ...jobCaller(ctx), spec: orderOf(spec) }
  if (idempotencyKey !== undefined) { msg.idempotencyKey = idempotencyKey; msg.fingerprint = fingerprint(ctx) }
  const r = await ctx.services.shards.ask(ctx.caller!.accountId, msg, 60_000)
  if (!r.replayed) ctx.meter.credits = r.created.credits_charged
  if (!r.replayed) ctx.services.metrics.jobCreated(spec.type, spec.model)
  const generated = !r.replayed && ctx.body && typeof ctx.body === 'object' && (ctx.body as Record<string, unknown>).webhook_secret === undefined && spec.request.webhook_url
  if (!generated) return { status: r.replayed ? 200 : 201, body: r.created }
  // An answer that carries a secret is never stored by a cache (docs/api.md "Webhooks").
  return { status: 201, headers: NO_STORE, body: { ...r.created, webhook_secret: spec.request.webhook_secret } }
}

function createRoute (
  path: string, summary: string, body: TSchema, validate: (b: unknown, o: ValidateOptions) => NormalizedRequest, extra: string[] = [],
): Route {
  return {
    method: 'POST',
    path,
    auth: 'key',
    scope: 'generate',
    summary,
    tag: 'Generation',
    manualValidation: true,
    headers: [IDEMPOTENCY_HEADER],
    errors: [...CREATE_ERRORS, ...extra],
    schema: { body, response: { 200: CreatedJob, 201: CreatedJob } },
    handler: (ctx) => create(ctx, validate),
  }
}

const BatchItemResult = Type.Object({
  index: Type.Integer(),
  type: Type.Union([Type.Literal('video'), Type.Literal('image'), Type.Null()]),
  status: Type.Union([Type.Integer(), Type.Null()], { description: 'HTTP status the item alone would get; null when SKIPPED' }),
  job: Type.Optional(CreatedJob),
  error: Type.Optional(ErrorEnvelope),
})
const BatchResponse = Type.Object({
  results: Type.Array(BatchItemResult),
  estimated_credits: Type.Integer(),
  credits_charged: Type.Integer(),
  remaining_credits: Type.Integer(),
  replayed: Type.Optional(Type.Literal(true)),
})

/** Generation routes (docs/api.md "Jobs"). */
export const routes: Route[] = [
  createRoute('/v1/generate/video', 'Create a video job (charged up front, refunded if the provider fails it)', VideoRequest, validateVideo),
  createRoute('/v1/generate/image', 'Create an image job; image_urls switches to edit mode', ImageRequest, validateImage),
  createRoute('/v1/generate/audio', 'Create an audio job: voiceover completes synchronously (result_url in the 201), music asynchronously', AudioRequest, validateAudio),
  createRoute('/v1/extend/video', 'Extend a completed veo3 video by about 7 seconds (120 credits)', ExtendRequest, validateExtend, ['JOB_NOT_FOUND']),
  {
    method: 'POST',
    path: '/v1/batch',
    auth: 'key',
    scope: 'generate',
    summary: 'Submit 1-10 video/image jobs in order (paid plans); the first 402 stops the batch and later items are SKIPPED',
    tag: 'Generation',
    manualValidation: true,
    headers: [IDEMPOTENCY_HEADER],
    errors: [...CREATE_ERRORS],
    schema: { body: BatchRequest, response: { 200: BatchResponse } },
    async handler (ctx) {
      const idempotencyKey = checkIdempotencyKey(ctx.headers['idempotency-key'])
      const caller = ctx.caller!
      await ctx.services.auth.requireVerified(caller, 'submit batches')
      let tier = caller.tier
      if (caller.kind === 'session') {
        const a = await ctx.services.auth.account(caller.accountId)
        tier = a?.enterprise ? 'enterprise' : a?.hasPurchased ? 'pro' : 'free'
      }
      if (tier === 'free') throw new ApiError('upgrade_required', 'POST /batch needs a paid plan; nothing was charged', { pricing_url: PRICING_URL })
      const items = validateBatch(ctx.body ?? {}, policy(ctx))
      // A batch already answered under this key is replayed (or refused as a conflict) by the
      // shard without looking at its items: screening them again would count each replay of
      // a flagged item as a new violation and end in a ban.
      const answered = idempotencyKey !== undefined && (await findBatch(ctx.services.sql, caller.accountId, idempotencyKey)) !== undefined
      const out: Array<{ index: number; type: 'video' | 'image' | null; spec?: JobOrder; error?: BatchItemView['error'] & { status: number } }> = []
      const generated = new Map<number, string>()
      for (const it of items) {
        if (!it.ok) { out.push({ index: it.index, type: it.type, error: { ...it.error.toJSON(), status: it.error.status } }); continue }
        try {
          const hadSecret = it.request.webhook_secret !== null
          const spec = await specFor(ctx, it.request, { screen: !answered })
          if (!hadSecret && spec.request.webhook_url) generated.set(it.index, spec.request.webhook_secret as string)
          out.push({ index: it.index, type: it.type, spec: orderOf(spec) })
        } catch (err) {
          if (!(err instanceof ApiError)) throw err
          out.push({ index: it.index, type: it.type, error: { ...err.toJSON(), status: err.status } })
        }
      }
      const view = await ctx.services.shards.ask(caller.accountId, {
        type: 'batch.create',
        ...jobCaller(ctx),
        items: out,
        idempotencyKey,
        fingerprint: idempotencyKey !== undefined ? fingerprint(ctx) : undefined,
      }, 120_000)
      if (!view.replayed) {
        ctx.meter.credits = view.credits_charged
        for (const r of view.results) if (r.job && r.type) ctx.services.metrics.jobCreated(r.type, r.job.model)
        for (const r of view.results) if (r.job && generated.has(r.index)) r.job = { ...r.job, webhook_secret: generated.get(r.index) }
      }
      return { status: 200, ...(!view.replayed && generated.size > 0 ? { headers: NO_STORE } : {}), body: view }
    },
  },
]
