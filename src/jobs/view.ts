/**
 * The Job resource (docs/api.md "Jobs", with credits_refunded and estimated_seconds) and
 * helpers shared by the shards (which own jobs) and the front end (which caches views).
 */
import { isoOf } from '../util/iso-time.js'

export type JobStatus = 'queued' | 'submitted' | 'processing' | 'completed' | 'failed' | 'cancelled'
export type JobType = 'video' | 'image' | 'audio' | 'extend'

export const TERMINAL: ReadonlySet<JobStatus> = new Set(['completed', 'failed', 'cancelled'])
export const ACTIVE_STATUSES: readonly JobStatus[] = ['queued', 'submitted', 'processing']

export interface JobView {
  id: string
  status: JobStatus
  type: JobType
  model: string
  /** Absent (undefined, left out of the JSON) for a job created without one (docs/decisions.md "A job without a prompt has no `prompt` field"). */
  prompt: string | undefined
  progress: number
  credits_charged: number
  credits_refunded: number
  estimated_seconds: number
  result_url: string | null
  error_message: string | null
  content_policy_violation: boolean
  created_at: string
  updated_at: string
  completed_at: string | null
}

/**
 * What a non-terminal change (a status transition or a progress tick) changes in a job's
 * view: the rest of JobView only changes when the job ends. Crosses from a shard to the front
 * ends as the compact `job.progress` event and is patched into the cached view (JobCache.progress).
 */
export interface JobProgress {
  id: string
  status: JobStatus
  progress: number
  updated_at: string
}

/** A jobs row as stored (src/db/jobs.ts). */
export interface JobRow {
  id: string
  account_id: number
  key_id: number | null
  type: JobType
  model: string
  status: JobStatus
  prompt: string | null
  request: Record<string, unknown>
  progress: number
  credits_charged: number
  credits_refunded: number
  estimated_seconds: number
  result_url: string | null
  error_message: string | null
  content_policy_violation: boolean
  provider: string
  provider_job_id: string | null
  idempotency_key: string | null
  request_hash: string | null
  source_job_id: string | null
  free_trial: boolean
  deadline_at: Date
  created_at: Date
  updated_at: Date
  completed_at: Date | null
  owner?: string | null
  lease_until?: Date | null
}

const iso = (d: Date | string | null): string | null => d === null ? null : (typeof d === 'string' ? d : isoOf(d))

export function viewOf (r: JobRow): JobView {
  return {
    id: r.id,
    status: r.status,
    type: r.type,
    model: r.model,
    prompt: r.prompt ?? undefined,
    progress: r.progress,
    credits_charged: r.credits_charged,
    credits_refunded: r.credits_refunded,
    estimated_seconds: r.estimated_seconds,
    result_url: r.result_url,
    error_message: r.error_message,
    content_policy_violation: r.content_policy_violation,
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
    completed_at: iso(r.completed_at),
  }
}

/** Job ids: `job_` + 16 base64url characters (96 random bits). */
export const JOB_ID_RE = /^job_[A-Za-z0-9_-]{16}$/
