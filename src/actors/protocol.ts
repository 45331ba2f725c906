import type { Config } from '../config.js'
import type { JobView } from '../jobs/view.js'
import type { UpstreamState } from '../providers/upstream.js'
import type { RouteState } from '../providers/registry.js'

/**
 * Every message that crosses a thread boundary (DESIGN.md section 2, "Message passing").
 * Only plain data crosses; errors cross as codes of src/errors.ts and are rebuilt on arrival.
 * Messages are batched per event-loop turn and msgpackr-encoded (src/actors/port.ts).
 */

/** An account's state as the AccountActor holds it. */
export interface AccountView {
  id: number
  email: string
  credits: number
  has_purchased: boolean
  enterprise: boolean
  banned: boolean
  credits_locked: boolean
  email_verified: boolean
  /** Videos made before the first purchase (free trial, SPEC.md 1.8). */
  free_videos_used: number
}

/** A validated, priced job request as the front end hands it to the account's shard. */
export interface JobSpec {
  type: 'video' | 'image' | 'audio' | 'extend'
  model: string
  prompt: string | null
  credits: number
  estimated_seconds: number
  /** The normalised request (src/catalog/validate.ts), stored on the job. */
  request: Record<string, unknown>
  /** Text where simulated-provider directives are looked for. */
  directiveText: string
  /** extend: the caller's completed veo3 job. */
  source_job_id?: string | null
}

/** Who asks for a job and under which limits (from the front end's auth). */
export interface JobCaller {
  accountId: number
  /** API key id; null for a dashboard session. */
  keyId: number | null
  /** In-flight jobs allowed for this key (tier max_concurrent). */
  maxConcurrent: number
}

/** CreatedJob (SPEC.md 2.2); voiceover adds result_url (it completes synchronously). */
export interface CreatedJobView {
  id: string
  status: string
  model: string
  credits_charged: number
  remaining_credits: number
  estimated_seconds: number
  result_url?: string | null
  /** Generated for a per-job webhook_url sent without a secret; returned once. */
  webhook_secret?: string
  replayed?: true
}

/** Per-item result of POST /v1/batch (DESIGN.md 7). */
export interface BatchItemView {
  index: number
  type: 'video' | 'image' | null
  status: number | null
  job?: CreatedJobView
  error?: { error: true; code: string; message: string; [k: string]: unknown }
}

export interface BatchView {
  results: BatchItemView[]
  estimated_credits: number
  credits_charged: number
  remaining_credits: number
  replayed?: true
}

/** Kinds of credit ledger entries (DESIGN.md section 3). */
export type CreditKind = 'grant' | 'purchase' | 'charge' | 'refund' | 'adjustment'

/** Requests from the main thread to a shard, keyed by tag, with their reply types. */
export interface ShardRequests {
  /** Balance and flags, loaded from PostgreSQL on first use. */
  'account.get': { req: { accountId: number }; res: AccountView }
  /** Adds credits (grant, purchase or adjustment) through the group commit. */
  'account.credit': {
    req: { accountId: number; credits: number; kind: 'grant' | 'purchase' | 'adjustment'; note?: string; currency?: string; amount?: number }
    res: AccountView
  }
  /** Drops the cached state so the next use reloads it (after an operator PATCH). */
  'account.reload': { req: { accountId: number }; res: AccountView }
  /** Creates a job: checks, charge, provider submission, commit (DESIGN.md sections 3 and 5). */
  'job.create': {
    req: JobCaller & { spec: JobSpec; idempotencyKey?: string; fingerprint?: string }
    res: { created: CreatedJobView; replayed: boolean }
  }
  /** DELETE /jobs/{id}: queued -> cancelled with a full refund, else CANNOT_CANCEL. */
  'job.cancel': { req: { accountId: number; jobId: string }; res: JobView }
  /** POST /batch: items priced, charged and submitted in order (SPEC.md 4.7). */
  'batch.create': {
    req: JobCaller & { items: Array<{ index: number; type: 'video' | 'image' | null; spec?: JobSpec; error?: BatchItemView['error'] & { status: number } }>; idempotencyKey?: string; fingerprint?: string }
    res: BatchView
  }
  /** A content-policy hit: counts it and suspends the account at the threshold. */
  'account.violation': { req: { accountId: number }; res: { violations: number; banned: boolean } }
  /**
   * A verified provider callback for a job of this account (issue 11 point 4): `state` when
   * the callback is signed over its body, else absent (a hint: the job polls now).
   */
  'job.callback': { req: { accountId: number; jobId: string; state?: UpstreamState }; res: 'live' | 'settled' | 'ignored' }
  /** Each configured route's breaker, in-flight and queued counts on this shard (GET /v1/health). */
  'shard.routes': { req: Record<never, never>; res: RouteState[] }
  /** Test and ops probe: answers after the shard's pending group commit is durable. */
  'shard.ping': { req: Record<never, never>; res: { shard: number; actors: number } }
  /** Metrics scrape (src/metrics.ts): this shard's worker-side measurements. */
  'shard.stats': { req: Record<never, never>; res: import('../worker-stats.js').StatsSnapshot }
}

export type ShardTag = keyof ShardRequests
export type ShardMsg = { [K in ShardTag]: { type: K } & ShardRequests[K]['req'] }[ShardTag]

/** A request envelope: `id` pairs it with its reply. */
export interface Envelope { id: number; msg: ShardMsg }

/** A reply envelope. */
export type ReplyEnvelope =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; code: string; message: string; extra?: Record<string, unknown> }

/** Events a shard pushes to the main thread unasked (job status changes, ...). */
export type ShardEvent =
  | { type: 'shard.ready'; shard: number }
  /** Every persisted change of a job (status, progress, terminal): feeds the read cache and SSE. */
  | { type: 'job.updated'; accountId: number; job: JobView }

/** One postMessage carries one batch: requests, replies and events of one event-loop turn. */
export interface Batch {
  req?: Envelope[]
  rep?: ReplyEnvelope[]
  ev?: ShardEvent[]
}

/** What a shard worker is started with. */
export interface ShardInit {
  shard: number
  shards: number
  databaseUrl: string
  config: Config
  /** This node's id: owner of the job leases its shards take. */
  nodeId: string
}
