import type { Q } from './connect.js'
import { numberArray, textArray } from './array-literal.js'
import type { JobRow, JobStatus } from '../jobs/view.js'

/** A job row as inserted: the columns of JobRow the database does not fill in itself. */
export type NewJob = Omit<JobRow, 'progress' | 'credits_refunded' | 'result_url' | 'error_message' | 'content_policy_violation' | 'updated_at' | 'completed_at'> &
  Partial<Pick<JobRow, 'progress' | 'result_url' | 'completed_at'>>

/** `(columns) VALUES (...)` of a new job row, used by chargeAndInsertJob. */
function jobColumnsValues (tx: Q, j: NewJob) {
  return tx`(id, account_id, key_id, type, model, status, prompt, request, credits_charged, estimated_seconds,
      provider, provider_job_id, idempotency_key, request_hash, source_job_id, free_trial, deadline_at, created_at, updated_at,
      progress, result_url, completed_at, owner, lease_until)
    VALUES (${j.id}, ${j.account_id}, ${j.key_id}, ${j.type}, ${j.model}, ${j.status}, ${j.prompt}, ${tx.json(j.request as any)},
      ${j.credits_charged}, ${j.estimated_seconds}, ${j.provider}, ${j.provider_job_id}, ${j.idempotency_key}, ${j.request_hash},
      ${j.source_job_id}, ${j.free_trial}, ${j.deadline_at}, ${j.created_at}, ${j.created_at},
      ${j.progress ?? 0}, ${j.result_url ?? null}, ${j.completed_at ?? null}, ${j.owner ?? null}, ${j.lease_until ?? null})`
}

/**
 * A creation's durable writes in ONE statement (DESIGN.md 3): the conditional charge, its
 * `charge` ledger entry and the job row. The charge is the cross-node authority (issue 15):
 * it needs `credits >= price`, and for the free-trial video also that the account's one free
 * video is still unused (it takes it: free_videos_used + 1). Returns the committed balance
 * (RETURNING), or null when refused: the entry and the job were written all the same, so the
 * caller MUST then fail its transaction (throwing inside group-commit work rolls it back). One
 * statement instead of three: per-statement work was most of a creation's cost.
 */
export async function chargeAndInsertJob (tx: Q, j: NewJob, note: string): Promise<{ credits: number; free_videos_used: number } | null> {
  const trial = j.free_trial
  const [row] = await tx<{ credits: number | null; free_videos_used: number | null }[]>`
    WITH charged AS (
      UPDATE accounts SET credits = credits - ${j.credits_charged}, updated_at = now(),
        free_videos_used = free_videos_used + ${trial ? 1 : 0}
      WHERE id = ${j.account_id} AND credits >= ${j.credits_charged}
        AND (${!trial} OR has_purchased OR enterprise OR free_videos_used < 1)
      RETURNING credits, free_videos_used
    ), entry AS (
      INSERT INTO credit_entries (account_id, delta, kind, job_id, note) VALUES (${j.account_id}, ${-j.credits_charged}, 'charge', ${j.id}, ${note})
    )
    INSERT INTO jobs ${jobColumnsValues(tx, j)}
    RETURNING (SELECT credits FROM charged) AS credits, (SELECT free_videos_used FROM charged) AS free_videos_used`
  return row.credits === null ? null : { credits: row.credits, free_videos_used: row.free_videos_used! }
}

/** A timestamp as text for an array literal. */
const isoOrNull = (d: Date | null | undefined): string | null => d == null ? null : d.toISOString()

/**
 * Many creations' durable writes in ONE statement (issue 12 point 4, DESIGN.md 3): one UPDATE
 * charging every account of the batch (its jobs' total, and its free video when one is the
 * trial video), one INSERT of the ledger entries, one INSERT of the job rows. An account whose
 * balance (or free video) does not cover its jobs together is charged for none of them and
 * nothing of it is written: its rows are absent from the result, and the caller retries them
 * one by one (chargeAndInsertJob). Returns, per charged account, its committed balance and
 * free_videos_used after all of its jobs.
 *
 * The rows cross as one array literal per column through unnest (docs/decisions.md "Creation
 * CPU"): a JSON document of the whole batch cost PostgreSQL a jsonb parse with key sorting per
 * row (jsonb_populate_recordset) and the shard a JSON.stringify of every row with its keys. Only
 * for creations not born completed (the group commit sends those alone): result_url and
 * completed_at are NULL.
 */
export async function chargeAndInsertJobs (tx: Q, jobs: NewJob[]): Promise<Map<number, { credits: number; free_videos_used: number }>> {
  const n = jobs.length
  const id = new Array<string>(n)
  const account = new Array<number>(n)
  const key = new Array<number | null>(n)
  const type = new Array<string>(n)
  const model = new Array<string>(n)
  const status = new Array<string>(n)
  const prompt = new Array<string | null>(n)
  const request = new Array<string>(n)
  const progress = new Array<number>(n)
  const credits = new Array<number>(n)
  const estimated = new Array<number>(n)
  const provider = new Array<string>(n)
  const providerJob = new Array<string | null>(n)
  const idem = new Array<string | null>(n)
  const hash = new Array<string | null>(n)
  const source = new Array<string | null>(n)
  const trial = new Array<string>(n)
  const deadline = new Array<string | null>(n)
  const created = new Array<string | null>(n)
  const owner = new Array<string | null>(n)
  const lease = new Array<string | null>(n)
  for (let k = 0; k < n; k++) {
    const j = jobs[k]
    id[k] = j.id
    account[k] = j.account_id
    key[k] = j.key_id
    type[k] = j.type
    model[k] = j.model
    status[k] = j.status
    prompt[k] = j.prompt
    request[k] = JSON.stringify(j.request)
    progress[k] = j.progress ?? 0
    credits[k] = j.credits_charged
    estimated[k] = j.estimated_seconds
    provider[k] = j.provider
    providerJob[k] = j.provider_job_id
    idem[k] = j.idempotency_key
    hash[k] = j.request_hash
    source[k] = j.source_job_id
    trial[k] = j.free_trial ? 't' : 'f'
    deadline[k] = isoOrNull(j.deadline_at)
    created[k] = isoOrNull(j.created_at)
    owner[k] = j.owner ?? null
    lease[k] = isoOrNull(j.lease_until)
  }
  const out = await tx<{ id: number; credits: number; free_videos_used: number }[]>`
    WITH j AS (
      SELECT * FROM unnest(${textArray(id)}::text[], ${numberArray(account)}::bigint[], ${numberArray(key)}::bigint[], ${textArray(type)}::text[],
        ${textArray(model)}::text[], ${textArray(status)}::text[], ${textArray(prompt)}::text[], ${textArray(request)}::text[],
        ${numberArray(progress)}::int[], ${numberArray(credits)}::int[], ${numberArray(estimated)}::int[], ${textArray(provider)}::text[],
        ${textArray(providerJob)}::text[], ${textArray(idem)}::text[], ${textArray(hash)}::text[], ${textArray(source)}::text[],
        ${textArray(trial)}::bool[], ${textArray(deadline)}::timestamptz[], ${textArray(created)}::timestamptz[], ${textArray(owner)}::text[],
        ${textArray(lease)}::timestamptz[])
        AS t(id, account_id, key_id, type, model, status, prompt, request, progress, credits_charged, estimated_seconds, provider,
          provider_job_id, idempotency_key, request_hash, source_job_id, free_trial, deadline_at, created_at, owner, lease_until)
    ),
    s AS (SELECT account_id, sum(credits_charged)::bigint AS total, count(*) FILTER (WHERE free_trial)::int AS trials FROM j GROUP BY account_id),
    charged AS (
      UPDATE accounts a SET credits = a.credits - s.total, free_videos_used = a.free_videos_used + s.trials, updated_at = now()
      FROM s WHERE a.id = s.account_id AND a.credits >= s.total
        AND (s.trials = 0 OR a.has_purchased OR a.enterprise OR a.free_videos_used + s.trials <= 1)
      RETURNING a.id, a.credits, a.free_videos_used
    ), entries AS (
      INSERT INTO credit_entries (account_id, delta, kind, job_id, note)
      SELECT j.account_id, -j.credits_charged, 'charge', j.id, j.type || ' ' || j.model FROM j JOIN charged c ON c.id = j.account_id
    ), inserted AS (
      INSERT INTO jobs (id, account_id, key_id, type, model, status, prompt, request, progress, credits_charged, estimated_seconds, provider,
        provider_job_id, idempotency_key, request_hash, source_job_id, free_trial, deadline_at, created_at, updated_at, owner, lease_until)
      SELECT id, account_id, key_id, type, model, status, prompt, request::jsonb, progress, credits_charged, estimated_seconds, provider,
        provider_job_id, idempotency_key, request_hash, source_job_id, free_trial, deadline_at, created_at, created_at, owner, lease_until
      FROM j WHERE j.account_id IN (SELECT id FROM charged)
    )
    SELECT id, credits, free_videos_used FROM charged`
  return new Map(out.map(r => [Number(r.id), { credits: r.credits, free_videos_used: r.free_videos_used }]))
}

/** Non-terminal progress: status, progress and the provider's id. */
export async function updateJobProgress (tx: Q, id: string, status: JobStatus, progress: number, providerJobId: string | null, at: Date): Promise<void> {
  await tx`
    UPDATE jobs SET status = ${status}, progress = ${progress}, provider_job_id = coalesce(${providerJobId}, provider_job_id), updated_at = ${at}
    WHERE id = ${id} AND status IN ('queued', 'submitted', 'processing')`
}

/** One non-terminal status change of a batch (updateJobsProgress). */
export interface Transition { id: string; status: JobStatus; progress: number; at: Date }

/**
 * Many non-terminal status changes in ONE statement (issue 12 point 4): what updateJobProgress
 * does for one job, for every transition of a group commit.
 */
export async function updateJobsProgress (tx: Q, items: Transition[]): Promise<void> {
  await tx`
    UPDATE jobs SET status = v.status, progress = v.progress, updated_at = v.at
    FROM (SELECT * FROM unnest(${items.map(i => i.id)}::text[], ${items.map(i => i.status)}::text[], ${items.map(i => i.progress)}::int[],
      ${items.map(i => i.at.toISOString())}::timestamptz[]) AS t(id, status, progress, at)) v
    WHERE jobs.id = v.id AND jobs.status IN ('queued', 'submitted', 'processing')`
}

export interface Terminal {
  status: 'completed' | 'failed' | 'cancelled'
  progress: number
  result_url: string | null
  error_message: string | null
  content_policy_violation: boolean
  credits_refunded: number
  at: Date
}

/** Moves a job to its terminal state; false when it already was terminal (nothing changed). */
export async function finishJob (tx: Q, id: string, t: Terminal): Promise<boolean> {
  const r = await tx`
    UPDATE jobs SET status = ${t.status}, progress = ${t.progress}, result_url = ${t.result_url}, error_message = ${t.error_message},
      content_policy_violation = ${t.content_policy_violation}, credits_refunded = ${t.credits_refunded},
      updated_at = ${t.at}, completed_at = ${t.at}
    WHERE id = ${id} AND status IN ('queued', 'submitted', 'processing')`
  return r.count === 1
}

export async function insertVideo (tx: Q, v: {
  account_id: number; job_id: string; prompt: string | null; model: string; model_id: string | null; aspect_ratio: string | null; video_url: string
  extended_from_video_id: number | null; created_at: Date; completed_at: Date
}): Promise<number> {
  const [row] = await tx<{ id: number }[]>`
    INSERT INTO videos (account_id, job_id, prompt, model, model_id, aspect_ratio, video_url, extended_from_video_id, created_at, completed_at)
    VALUES (${v.account_id}, ${v.job_id}, ${v.prompt}, ${v.model}, ${v.model_id}, ${v.aspect_ratio}, ${v.video_url}, ${v.extended_from_video_id}, ${v.created_at}, ${v.completed_at})
    RETURNING id`
  return row.id
}

export async function insertImage (tx: Q, i: {
  account_id: number; job_id: string; prompt: string | null; model: string; model_id: string | null; image_url: string; created_at: Date
  completed_at: Date
}): Promise<number> {
  const [row] = await tx<{ id: number }[]>`
    INSERT INTO images (account_id, job_id, prompt, model, model_id, image_url, created_at, completed_at)
    VALUES (${i.account_id}, ${i.job_id}, ${i.prompt}, ${i.model}, ${i.model_id}, ${i.image_url}, ${i.created_at}, ${i.completed_at})
    RETURNING id`
  return row.id
}

export async function videoIdOfJob (sql: Q, jobId: string): Promise<number | null> {
  const [r] = await sql<{ id: number }[]>`SELECT id FROM videos WHERE job_id = ${jobId}`
  return r ? r.id : null
}

export async function getJob (sql: Q, id: string): Promise<JobRow | undefined> {
  const [row] = await sql<JobRow[]>`SELECT * FROM jobs WHERE id = ${id}`
  return row
}

export async function findJobByIdempotencyKey (sql: Q, accountId: number, key: string): Promise<JobRow | undefined> {
  const [row] = await sql<JobRow[]>`SELECT * FROM jobs WHERE account_id = ${accountId} AND idempotency_key = ${key}`
  return row
}

/** In-flight jobs per API key (null = session) of one account, when its actor loads. */
export async function activeCountsByKey (sql: Q, accountId: number): Promise<Map<number | null, number>> {
  const rows = await sql<{ key_id: number | null; n: number }[]>`
    SELECT key_id, count(*)::int AS n FROM jobs WHERE account_id = ${accountId} AND status IN ('queued', 'submitted', 'processing') GROUP BY key_id`
  return new Map(rows.map(r => [r.key_id, r.n]))
}

/** How long a job lease lasts; the owner renews it every LEASE_MS / 3. */
export const LEASE_MS = 30_000

/**
 * Claims non-terminal jobs of this shard's accounts that no live node holds: unowned, lease
 * expired, or (at boot, `reclaimOwn`) left by a previous run of this node. SKIP LOCKED lets
 * several nodes claim at once without waiting on each other.
 */
export async function claimJobs (sql: Q, node: string, shard: number, shards: number, reclaimOwn: boolean, limit = 1000): Promise<JobRow[]> {
  return sql<JobRow[]>`
    UPDATE jobs SET owner = ${node}, lease_until = now() + make_interval(secs => ${LEASE_MS / 1000})
    WHERE id IN (
      SELECT id FROM jobs
      WHERE status IN ('queued', 'submitted', 'processing') AND account_id % ${shards} = ${shard}
        AND (owner IS NULL OR lease_until IS NULL OR lease_until < now() ${reclaimOwn ? sql`OR owner = ${node}` : sql``})
      ORDER BY created_at LIMIT ${limit}
      FOR UPDATE SKIP LOCKED)
    RETURNING *`
}

/**
 * Renews the leases of the jobs this node runs; returns the ids still running here.
 * Rows another transaction holds right now (a group commit moving them) are skipped, not
 * waited for: waiting made renewal and multi-row commits deadlock (bench job-lifecycle saw
 * "deadlock detected"). A skipped row keeps its lease (3 renewals long) and is renewed next
 * time; whether it is still ours is read without locks. Only the leases in `due` are written
 * (the caller leaves out leases taken moments ago); every id in `ids` is checked.
 */
export async function renewLeases (sql: Q, node: string, ids: string[], due: string[] = ids): Promise<Set<string>> {
  if (ids.length === 0) return new Set()
  if (due.length > 0) {
    await sql`UPDATE jobs SET lease_until = now() + make_interval(secs => ${LEASE_MS / 1000})
    WHERE id IN (SELECT id FROM jobs WHERE id = ANY(${due}::text[]) AND owner = ${node}
      AND status IN ('queued', 'submitted', 'processing') FOR UPDATE SKIP LOCKED)`
  }
  const rows = await sql<{ id: string }[]>`SELECT id FROM jobs
    WHERE id = ANY(${ids}::text[]) AND owner = ${node} AND status IN ('queued', 'submitted', 'processing')`
  return new Set(rows.map(r => r.id))
}

/**
 * Progress ticks kept in memory (issue 12 point 4), written every few seconds in ONE
 * statement; a row that became terminal meanwhile is left alone.
 */
export async function saveProgress (sql: Q, rows: Array<{ id: string; progress: number; updated_at: Date }>): Promise<void> {
  if (rows.length === 0) return
  // Rows being committed right now are skipped (never waited for: no deadlock with a group
  // commit); their progress is shown from memory anyway and written by the next transition.
  await sql`UPDATE jobs SET progress = v.progress, updated_at = v.updated_at
    FROM (SELECT * FROM unnest(${rows.map(r => r.id)}::text[], ${rows.map(r => r.progress)}::int[], ${rows.map(r => r.updated_at.toISOString())}::timestamptz[])
      AS t(id, progress, updated_at)) v
    WHERE jobs.id = v.id AND jobs.id IN (SELECT id FROM jobs WHERE id = ANY(${rows.map(r => r.id)}::text[])
      AND status IN ('queued', 'submitted', 'processing') FOR UPDATE SKIP LOCKED)`
}

export interface JobFilter { status?: string; model?: string; type?: string; limit: number; offset: number }

export async function listJobs (sql: Q, accountId: number, f: JobFilter): Promise<{ rows: JobRow[]; total: number }> {
  const where = sql`account_id = ${accountId}
    ${f.status ? sql`AND status = ${f.status}` : sql``}
    ${f.model ? sql`AND model = ${f.model}` : sql``}
    ${f.type ? sql`AND type = ${f.type}` : sql``}`
  const [rows, [{ total }]] = await Promise.all([
    sql<JobRow[]>`SELECT * FROM jobs WHERE ${where} ORDER BY created_at DESC, id DESC LIMIT ${f.limit} OFFSET ${f.offset}`,
    sql<{ total: number }[]>`SELECT count(*)::int AS total FROM jobs WHERE ${where}`,
  ])
  return { rows, total }
}

export interface VideoRow {
  id: number; prompt: string | null; model: string | null; model_id: string | null; aspect_ratio: string | null; video_url: string
  embed_url: string | null; thumbnail_url: string | null; extended_from_video_id: number | null; created_at: Date; completed_at: Date | null
}
export interface ImageRow {
  id: number; prompt: string | null; model: string | null; model_id: string | null; image_url: string; is_favorite: boolean; created_at: Date
  completed_at: Date | null
}

export async function listVideos (
  sql: Q, accountId: number, f: { model?: string; limit: number; offset: number }
): Promise<{ rows: VideoRow[]; total: number }> {
  const where = sql`account_id = ${accountId} ${f.model ? sql`AND model_id = ${f.model}` : sql``}`
  const [rows, [{ total }]] = await Promise.all([
    sql<VideoRow[]>`SELECT id, prompt, model, model_id, aspect_ratio, video_url, embed_url, thumbnail_url, extended_from_video_id, created_at, completed_at
      FROM videos WHERE ${where} ORDER BY created_at DESC, id DESC LIMIT ${f.limit} OFFSET ${f.offset}`,
    sql<{ total: number }[]>`SELECT count(*)::int AS total FROM videos WHERE ${where}`,
  ])
  return { rows, total }
}

export async function listImages (
  sql: Q, accountId: number, f: { model?: string; favorite?: boolean; limit: number; offset: number }
): Promise<{ rows: ImageRow[]; total: number }> {
  const where = sql`account_id = ${accountId} ${f.model ? sql`AND model_id = ${f.model}` : sql``} ${f.favorite ? sql`AND is_favorite` : sql``}`
  const [rows, [{ total }]] = await Promise.all([
    sql<ImageRow[]>`SELECT id, prompt, model, model_id, image_url, is_favorite, created_at, completed_at
      FROM images WHERE ${where} ORDER BY created_at DESC, id DESC LIMIT ${f.limit} OFFSET ${f.offset}`,
    sql<{ total: number }[]>`SELECT count(*)::int AS total FROM images WHERE ${where}`,
  ])
  return { rows, total }
}

export async function findBatch (sql: Q, accountId: number, key: string): Promise<{ request_hash: string; response: unknown } | undefined> {
  const [r] = await sql<{ request_hash: string; response: unknown }[]>`SELECT request_hash, response FROM batches WHERE account_id = ${accountId} AND idempotency_key = ${key}`
  return r
}

export async function insertBatch (tx: Q, accountId: number, key: string, hash: string, response: unknown): Promise<void> {
  await tx`INSERT INTO batches (account_id, idempotency_key, request_hash, response) VALUES (${accountId}, ${key}, ${hash}, ${tx.json(response as any)}) ON CONFLICT DO NOTHING`
}

export async function setFreeVideosUsed (tx: Q, accountId: number, delta: number): Promise<void> {
  await tx`UPDATE accounts SET free_videos_used = greatest(0, free_videos_used + ${delta}) WHERE id = ${accountId}`
}

/** Non-terminal jobs per status (GET /metrics). */
export async function activeJobsByStatus (sql: Q): Promise<Array<{ status: string; n: number }>> {
  return sql<{ status: string; n: number }[]>`SELECT status, count(*)::int AS n FROM jobs WHERE status IN ('queued', 'submitted', 'processing') GROUP BY status`
}

/** The route a job was created on (a configured route that kept no handle yet). */
export async function setJobRoute (tx: Q, id: string, route: string): Promise<void> {
  await tx`UPDATE jobs SET route = ${route} WHERE id = ${id}`
}
