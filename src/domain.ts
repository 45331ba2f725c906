/**
 * Domain types shared by the HTTP front end, the shard actors and src/db:
 * src/db imports these, never anything from src/shard.
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
  /** Videos made before the first purchase (free trial, docs/api.md "Jobs"). */
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

/**
 * A job spec as it crosses to the shard: the prompt travels once, inside
 * `request`; `prompt` and `directiveText` are derived again on arrival (src/jobs/spec.ts).
 */
export type JobOrder = Omit<JobSpec, 'prompt' | 'directiveText'>

/** Who asks for a job and under which limits (from the front end's auth). */
export interface JobCaller {
  accountId: number
  /** API key id; null for a dashboard session. */
  keyId: number | null
  /** In-flight jobs allowed for this key (tier max_concurrent). */
  maxConcurrent: number
}

/** CreatedJob (docs/api.md "Jobs"); voiceover adds result_url (it completes synchronously). */
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

/** Per-item result of POST /v1/batch (docs/api.md "Batch (paid plans)"). */
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

/** Kinds of credit ledger entries (docs/architecture.md "Durability", the ledger). */
export type CreditKind = 'grant' | 'purchase' | 'charge' | 'refund' | 'adjustment'

/**
 * What identifies a submitted upstream job. Stored with the job (JSON) so status, result and
 * cancel survive a restart and work on any node. `id` is what callbacks carry.
 */
export interface UpstreamHandle {
  id: string
  model: string
  /** URLs the provider answered with at submission (fal: status_url, response_url, cancel_url). */
  urls?: Record<string, string>
}

/**
 * How long a claimed outbox row belongs to the delivery worker that holds it (webhook_deliveries
 * `claimed_until`): longer than any attempt, so only a dead node's rows come due again
 * (docs/architecture.md "Durability", the outbox).
 */
export const CLAIM_LEASE_S = 60
