import { jsonOf, type Q } from './connect.js'
import type { UpstreamHandle } from '../domain.js'
import type { JobRow } from '../jobs/view.js'
import { textArray } from './array-literal.js'
import { isoOf } from '../util/iso-time.js'

/**
 * Upstream bookkeeping of jobs (sql/0008_upstream.sql): the route and handle of a
 * submission, the upstream status history, and the callback lookup.
 */

export interface UpstreamEvent {
  job_id: string
  source: 'submit' | 'refused' | 'poll' | 'callback' | 'cancel' | 'deadline' | 'late' | 'stored' | 'store_failed'
  route: string | null
  state: string
  detail?: Record<string, unknown> | null
  at?: Date
}

/**
 * What a creation on a configured route writes beside its job row (sql/0008): the route, the
 * handle and submission time when the provider took the job at once, and the first history
 * (refusals of earlier routes, the submission). Written in the creation's own statement
 * (chargeAndInsertJobs, chargeAndInsertJob).
 */
export interface RouteRecord {
  route: string
  upstream: UpstreamHandle | null
  submitted_at: Date | null
  events: UpstreamEvent[]
}

/** Events as the JSON array the batch statements expand (jsonb_array_elements); `at` defaults to `at`. */
export function eventsJson (events: UpstreamEvent[], at: Date): string {
  return JSON.stringify(events.map(e => ({ source: e.source, route: e.route, state: e.state, detail: e.detail ?? null, at: isoOf(e.at ?? at) })))
}

/**
 * The INSERT of the events of a batch statement's rows: `from` names a relation with the job id
 * in `id` and the events (eventsJson) in `history`, NULL for none, and `and` a further condition
 * on it; kept in each job's order.
 */
export function insertEventsFrom (from: string, and = ''): string {
  return `INSERT INTO job_upstream_events (job_id, source, route, state, detail, at)
      SELECT d.id, e.x->>'source', e.x->>'route', e.x->>'state', nullif(e.x->'detail', 'null'::jsonb), (e.x->>'at')::timestamptz
      FROM ${from} CROSS JOIN LATERAL jsonb_array_elements(d.history::jsonb) WITH ORDINALITY AS e(x, n)
      WHERE d.history IS NOT NULL${and ? ` AND ${and}` : ''} ORDER BY d.id, e.n`
}

/**
 * A job handed to a provider: route, handle and the deadline counted from now (docs/architecture.md "Providers and media":
 * the deadline applies only to jobs a provider holds). Only a non-terminal job changes.
 */
export async function recordSubmission (tx: Q, jobId: string, s: {
  route: string; provider: string; handle: UpstreamHandle; deadline: Date; at: Date
}): Promise<boolean> {
  const r = await tx`
    UPDATE jobs SET status = 'submitted', provider = ${s.provider}, provider_job_id = ${s.handle.id}, upstream = ${tx.json(jsonOf(s.handle))},
      route = ${s.route}, submitted_at = ${s.at}, deadline_at = ${s.deadline}, updated_at = ${s.at}
    WHERE id = ${jobId} AND status IN ('queued', 'submitted', 'processing')`
  return r.count === 1
}

/**
 * A submission on `route` got no definitive answer (docs/providers.md "No duplicate upstream
 * jobs"): the job is `submitted` on that route without an upstream id, so a resume looks for
 * the upstream job before anything is sent again. Only a non-terminal job without a handle changes.
 */
export async function recordUnanswered (tx: Q, jobId: string, s: { route: string; provider: string; at: Date }): Promise<boolean> {
  const r = await tx`
    UPDATE jobs SET status = 'submitted', provider = ${s.provider}, route = ${s.route}, updated_at = ${s.at}
    WHERE id = ${jobId} AND status IN ('queued', 'submitted', 'processing') AND provider_job_id IS NULL`
  return r.count === 1
}

/** Which of these upstream ids of `provider` a job other than `jobId` already holds. */
export async function claimedUpstreamIds (sql: Q, provider: string, ids: string[], jobId: string): Promise<Set<string>> {
  if (ids.length === 0) return new Set()
  const rows = await sql<{ provider_job_id: string }[]>`
    SELECT provider_job_id FROM jobs WHERE provider = ${provider} AND provider_job_id = ANY(${ids}) AND id <> ${jobId}`
  return new Set(rows.map(r => r.provider_job_id))
}

export async function appendEvents (tx: Q, events: UpstreamEvent[]): Promise<void> {
  if (events.length === 0) return
  const rows = events.map(e => ({
    job_id: e.job_id, source: e.source, route: e.route, state: e.state, detail: e.detail ? tx.json(jsonOf(e.detail)) : null, at: e.at ?? new Date()
  }))
  await tx`INSERT INTO job_upstream_events ${tx(rows, 'job_id', 'source', 'route', 'state', 'detail', 'at')}`
}

/**
 * A success seen for a job that already ended failed or cancelled (refunded): recorded for the
 * operator, no money moves. Nothing is written when the job completed (another
 * node got there first).
 */
export async function recordLateSuccess (tx: Q, e: UpstreamEvent): Promise<void> {
  await tx`INSERT INTO job_upstream_events (job_id, source, route, state, detail, at)
    SELECT ${e.job_id}, 'late', ${e.route}, 'succeeded', ${e.detail ? tx.json(jsonOf(e.detail)) : null}, now()
    WHERE EXISTS (SELECT 1 FROM jobs WHERE id = ${e.job_id} AND status IN ('failed', 'cancelled'))`
}

/** The job a callback is about (docs/architecture.md "A provider callback": callbacks carry the upstream id). */
export async function findJobByUpstream (
  sql: Q, provider: string, upstreamId: string
): Promise<{ id: string; account_id: number; status: string; owner: string | null } | undefined> {
  const [r] = await sql<{ id: string; account_id: number; status: string; owner: string | null }[]>`
    SELECT id, account_id::int AS account_id, status, owner FROM jobs WHERE provider = ${provider} AND provider_job_id = ${upstreamId}
    ORDER BY created_at DESC LIMIT 1`
  return r
}

export interface JobUpstream {
  route: string | null
  upstream: UpstreamHandle | null
  submitted_at: Date | null
  events: Array<{ at: Date; source: string; route: string | null; state: string; detail: unknown }>
}

/** What GET /v1/admin/jobs/{id} shows besides the job. */
export async function jobUpstream (sql: Q, jobId: string): Promise<JobUpstream | undefined> {
  const [j] = await sql<Array<{ route: string | null; upstream: UpstreamHandle | null; submitted_at: Date | null }>>`
    SELECT route, upstream, submitted_at FROM jobs WHERE id = ${jobId}`
  if (!j) return undefined
  const events = await sql<JobUpstream['events']>`
    SELECT at, source, route, state, detail FROM job_upstream_events WHERE job_id = ${jobId} ORDER BY id`
  return { ...j, events: [...events] }
}

/** A library video's thumbnail and embed page (docs/providers.md "Routing", Results): the page's random token and its URL. */
export async function setVideoMedia (tx: Q, videoId: number, thumbnailUrl: string | null, embedToken: string, embedUrl: string): Promise<void> {
  await tx`UPDATE videos SET thumbnail_url = ${thumbnailUrl}, embed_token = ${embedToken}, embed_url = ${embedUrl} WHERE id = ${videoId}`
}

/** What the embed page shows: the media only (never the prompt, which is the owner's). */
export interface EmbedVideo { video_url: string; thumbnail_url: string | null; aspect_ratio: string | null }

/** The video whose embed page has this token (sql/0015_embed_tokens.sql). */
export async function embedVideo (sql: Q, token: string): Promise<EmbedVideo | undefined> {
  const [v] = await sql<EmbedVideo[]>`SELECT video_url, thumbnail_url, aspect_ratio FROM videos WHERE embed_token = ${token}`
  return v
}

/**
 * The rows of waiting jobs that came due (docs/architecture.md "Waiting jobs"): one SELECT for
 * a batch, whatever their state now (the caller drops those that ended or moved).
 */
export async function jobsByIds (sql: Q, ids: string[]): Promise<JobRow[]> {
  if (ids.length === 0) return []
  return sql<JobRow[]>`SELECT * FROM jobs WHERE id = ANY(${textArray(ids)}::text[])`
}

/**
 * Non-terminal jobs of this shard that this node already owns, after `afterId` in id order, at
 * most `limit`: a restarted node pages through all of them (the boot claim takes one page).
 */
export async function ownedActiveJobs (sql: Q, node: string, shard: number, shards: number, afterId: string, limit = 1000): Promise<JobRow[]> {
  return sql<JobRow[]>`SELECT * FROM jobs
    WHERE owner = ${node} AND status IN ('queued', 'submitted', 'processing') AND account_id % ${shards} = ${shard} AND id > ${afterId}
    ORDER BY id LIMIT ${limit}`
}
