import { jsonOf, type Q } from './connect.js'
import { numberArray, textArray } from './array-literal.js'
import type { JobRow, JobStatus } from '../jobs/view.js'
import { eventsJson, insertEventsFrom, type RouteRecord } from './upstream.js'
import { isoOf } from '../util/iso-time.js'

/** A job row as inserted: the columns of JobRow the database does not fill in itself. */
export type NewJob = Omit<JobRow, 'progress' | 'credits_refunded' | 'result_url' | 'error_message' | 'content_policy_violation' | 'updated_at' | 'completed_at'> &
  Partial<Pick<JobRow, 'progress' | 'result_url' | 'completed_at'>>

/** A timestamp as text for an array literal. */
const isoOrNull = (d: Date | null | undefined): string | null => d == null ? null : isoOf(d)

/** One column of a creation batch: its name, its array's element type and its value in a row. */
interface BatchColumn {
  name: string
  /** PostgreSQL element type of the column's array parameter. */
  type: 'text' | 'bigint' | 'int' | 'bool' | 'timestamptz'
  value: (j: NewJob) => string | number | null
  /** What the jobs INSERT selects for it (default: the column itself). */
  select?: string
}

/** The columns a creation batch sends, in parameter order (result_url, completed_at: NULL). */
const BATCH_COLUMNS: readonly BatchColumn[] = [
  { name: 'id', type: 'text', value: j => j.id },
  { name: 'account_id', type: 'bigint', value: j => j.account_id },
  { name: 'key_id', type: 'bigint', value: j => j.key_id },
  { name: 'type', type: 'text', value: j => j.type },
  { name: 'model', type: 'text', value: j => j.model },
  { name: 'status', type: 'text', value: j => j.status },
  { name: 'prompt', type: 'text', value: j => j.prompt },
  { name: 'request', type: 'text', value: j => JSON.stringify(j.request), select: 'request::jsonb' },
  { name: 'progress', type: 'int', value: j => j.progress ?? 0 },
  { name: 'credits_charged', type: 'int', value: j => j.credits_charged },
  { name: 'estimated_seconds', type: 'int', value: j => j.estimated_seconds },
  { name: 'provider', type: 'text', value: j => j.provider },
  { name: 'provider_job_id', type: 'text', value: j => j.provider_job_id },
  { name: 'idempotency_key', type: 'text', value: j => j.idempotency_key },
  { name: 'request_hash', type: 'text', value: j => j.request_hash },
  { name: 'source_job_id', type: 'text', value: j => j.source_job_id },
  { name: 'free_trial', type: 'bool', value: j => j.free_trial ? 't' : 'f' },
  { name: 'deadline_at', type: 'timestamptz', value: j => isoOrNull(j.deadline_at) },
  { name: 'created_at', type: 'timestamptz', value: j => isoOrNull(j.created_at) },
  { name: 'owner', type: 'text', value: j => j.owner ?? null },
  { name: 'lease_until', type: 'timestamptz', value: j => isoOrNull(j.lease_until) },
]

/** The columns a creation on a configured route adds (its RouteRecord); `history` is not a jobs column. */
const ROUTE_COLUMNS: ReadonlyArray<{ name: string; type: 'text' | 'timestamptz'; value: (r: RouteRecord) => string | null; select?: string }> = [
  { name: 'route', type: 'text', value: r => r.route },
  { name: 'upstream', type: 'text', value: r => r.upstream ? JSON.stringify(r.upstream) : null, select: 'upstream::jsonb' },
  { name: 'submitted_at', type: 'timestamptz', value: r => isoOrNull(r.submitted_at) },
  { name: 'history', type: 'text', value: r => r.events.length > 0 ? eventsJson(r.events, r.submitted_at ?? new Date()) : null },
]

/**
 * The CTEs of a batch's creations (writeBatch, src/db/ledger.ts): `j` unnests the rows ($n
 * from `offset` + 1 is the n-th column's array literal: BATCH_COLUMNS, then ROUTE_COLUMNS when
 * `routed`), `charged` UPDATEs every account of the batch (its jobs' total, and its free video
 * when one is the trial video), then the ledger entries, the job rows and, when `routed`, the
 * first history of creations on configured routes (their route, handle and submission time go
 * in the job row; a batch of simulated creations sends none of it). An account whose balance
 * (or free video) does not cover its jobs together is charged for none of them and nothing of
 * it is written: it is absent from `charged`, and the caller retries its creations one by one
 * (chargeAndInsertJob).
 *
 * The rows cross as one array literal per column (docs/decisions.md "Creation CPU"): a JSON
 * document of the whole batch cost PostgreSQL a jsonb parse with key sorting per row and the
 * shard a JSON.stringify of every row with its keys. result_url and completed_at are NULL: a
 * creation born completed is inserted running and completed by a second statement of its
 * transaction (src/shard/group-commit.ts).
 */
export function creationCtes (routed: boolean, offset: number): string {
  const cols: ReadonlyArray<{ name: string; type: string; select?: string }> = routed ? [...BATCH_COLUMNS, ...ROUTE_COLUMNS] : BATCH_COLUMNS
  const inserted = cols.filter(c => c.name !== 'history')
  return `j AS (
      SELECT * FROM unnest(${cols.map((c, i) => `$${offset + i + 1}::${c.type}[]`).join(', ')})
        AS t(${cols.map(c => c.name).join(', ')})
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
      INSERT INTO jobs (${inserted.map(c => c.name).join(', ')}, updated_at)
      SELECT ${inserted.map(c => c.select ?? c.name).join(', ')}, created_at
      FROM j WHERE j.account_id IN (SELECT id FROM charged)
    )${routed ? `, events AS (
      ${insertEventsFrom('j d', 'd.account_id IN (SELECT id FROM charged)')}
    )` : ''}`
}

/** How many parameters creationCtes takes. */
export const creationParamCount = (routed: boolean): number => BATCH_COLUMNS.length + (routed ? ROUTE_COLUMNS.length : 0)

/** creationCtes' parameters for these creations (`records[k]`: creation k's route, or null); `routed` when any has one. */
export function creationParams (jobs: NewJob[], records: ReadonlyArray<RouteRecord | null>): { params: string[]; routed: boolean } {
  const n = jobs.length
  const routed = records.some(r => r !== null)
  const params: string[] = new Array(creationParamCount(routed))
  const xs: Array<string | number | null> = new Array(n)
  for (let c = 0; c < BATCH_COLUMNS.length; c++) {
    const col = BATCH_COLUMNS[c]
    for (let k = 0; k < n; k++) xs[k] = col.value(jobs[k])
    params[c] = col.type === 'bigint' || col.type === 'int' ? numberArray(xs as Array<number | null>) : textArray(xs as Array<string | null>)
  }
  if (routed) {
    for (let c = 0; c < ROUTE_COLUMNS.length; c++) {
      const col = ROUTE_COLUMNS[c]
      for (let k = 0; k < n; k++) { const r = records[k]; xs[k] = r ? col.value(r) : null }
      params[BATCH_COLUMNS.length + c] = textArray(xs as Array<string | null>)
    }
  }
  return { params, routed }
}

/** One non-terminal status change of a batch (updateJobsProgress). */
export interface Transition { id: string; status: JobStatus; progress: number; at: Date }

/**
 * The CTE of a batch's non-terminal status changes (writeBatch, src/db/ledger.ts; one row:
 * updateJobProgress), for every transition of a group commit, from 4 array
 * parameters after `offset` (transitionParams). At most one transition per job (one statement
 * cannot update a row twice).
 */
export function transitionCte (offset: number): string {
  return `moved AS (
      UPDATE jobs SET status = m.status, progress = m.progress, updated_at = m.at
      FROM unnest($${offset + 1}::text[], $${offset + 2}::text[], $${offset + 3}::int[], $${offset + 4}::timestamptz[]) AS m(id, status, progress, at)
      WHERE jobs.id = m.id AND jobs.status IN ('queued', 'submitted', 'processing')
    )`
}

/** transitionCte's parameters. */
export function transitionParams (items: Transition[]): string[] {
  return [
    textArray(items.map(i => i.id)), textArray(items.map(i => i.status)), numberArray(items.map(i => i.progress)),
    textArray(items.map(i => isoOf(i.at))),
  ]
}

/** The result rows of a batch statement that returns none (writeBatch, src/db/ledger.ts). */
export const NO_ROWS = 'SELECT NULL::bigint AS account, NULL::bigint AS credits, NULL::int AS free_videos_used, NULL::text AS job WHERE false'

/** writeBatch's statement of transitions alone (the same text, so the same prepared statement). */
const TRANSITIONS_ONLY = `WITH ${transitionCte(0)}\n    ${NO_ROWS}`

/**
 * One non-terminal status change inside the caller's transaction: the batch statement's
 * transition (transitionCte) with one row. `providerJobId` must be null: a provider's id is
 * written with the submission (src/db/upstream.ts recordSubmission).
 */
export async function updateJobProgress (tx: Q, id: string, status: JobStatus, progress: number, providerJobId: string | null, at: Date): Promise<void> {
  if (providerJobId !== null) throw new TypeError('updateJobProgress: the provider job id is written by recordSubmission')
  await tx.unsafe(TRANSITIONS_ONLY, transitionParams([{ id, status, progress, at }]), { prepare: true })
}

export async function getJob (sql: Q, id: string): Promise<JobRow | undefined> {
  const [row] = await sql<JobRow[]>`SELECT * FROM jobs WHERE id = ${id}`
  return row
}

export async function findJobByIdempotencyKey (sql: Q, accountId: number, key: string): Promise<JobRow | undefined> {
  const [row] = await sql<JobRow[]>`SELECT * FROM jobs WHERE account_id = ${accountId} AND idempotency_key = ${key}`
  return row
}

/** What a creation needs of the job an Idempotency-Key already names: the job and its request's fingerprint. */
export interface IdemRow { pair: string; id: string; request_hash: string | null }

/**
 * One account's Idempotency-Key as one string, `account key`: a key never holds a space (SPEC's
 * alphabet is A-Z a-z 0-9 _ . -, checked before a creation reaches its shard).
 */
export const idemPair = (accountId: number, key: string): string => `${accountId} ${key}`

/**
 * The jobs these (account, Idempotency-Key) pairs name (idemPair each), in one statement on
 * the jobs_idempotency index; a pair no job holds has no row (docs/architecture.md
 * "Durability", Idempotency).
 */
export async function jobsByIdempotencyKeys (sql: Q, pairs: string[]): Promise<IdemRow[]> {
  if (pairs.length === 0) return []
  const accounts: number[] = new Array(pairs.length)
  const keys: string[] = new Array(pairs.length)
  for (let i = 0; i < pairs.length; i++) {
    const sp = pairs[i].indexOf(' ')
    accounts[i] = Number(pairs[i].slice(0, sp))
    keys[i] = pairs[i].slice(sp + 1)
  }
  // `idempotency_key IS NOT NULL` lets the planner prove the partial index's predicate (a join
  // clause alone does not), so each pair is one probe of jobs_idempotency.
  return sql<IdemRow[]>`
    SELECT j.account_id || ' ' || j.idempotency_key AS pair, j.id, j.request_hash
    FROM unnest(${numberArray(accounts)}::bigint[], ${textArray(keys)}::text[]) AS k(account_id, key)
    JOIN jobs j ON j.account_id = k.account_id AND j.idempotency_key = k.key AND j.idempotency_key IS NOT NULL`
}

/**
 * In-flight jobs per API key (null = session) of one account, when its actor loads. Running
 * jobs are found by `completed_at IS NULL` (the partial index jobs_running, sql/0018).
 */
export async function activeCountsByKey (sql: Q, accountId: number): Promise<Map<number | null, number>> {
  const rows = await sql<{ key_id: number | null; n: number }[]>`
    SELECT key_id, count(*)::int AS n FROM jobs
    WHERE account_id = ${accountId} AND completed_at IS NULL AND status IN ('queued', 'submitted', 'processing') GROUP BY key_id`
  return new Map(rows.map(r => [r.key_id, r.n]))
}

/** How long a lease lasts; a shard renews its own every LEASE_MS / 3. */
export const LEASE_MS = 30_000

/**
 * Claims non-terminal jobs of this shard's accounts that no live shard holds: unowned, or
 * whose owner's shard lease (shard_leases, renewed by renewShardLease) has lapsed and whose
 * own grace lease (set when the job was created or claimed) is over, or (at boot,
 * `reclaimOwn`) left by a previous run of this node. SKIP LOCKED lets several nodes claim at
 * once without waiting on each other.
 */
export async function claimJobs (sql: Q, node: string, shard: number, shards: number, reclaimOwn: boolean, limit = 1000): Promise<JobRow[]> {
  return sql<JobRow[]>`
    UPDATE jobs SET owner = ${node}, lease_until = now() + make_interval(secs => ${LEASE_MS / 1000})
    WHERE id IN (
      SELECT id FROM jobs
      WHERE completed_at IS NULL AND status IN ('queued', 'submitted', 'processing') AND account_id % ${shards} = ${shard}
        AND (owner IS NULL ${reclaimOwn ? sql`OR owner = ${node}` : sql``}
          OR (owner <> ${node} AND (lease_until IS NULL OR lease_until < now()) AND NOT EXISTS (
            SELECT 1 FROM shard_leases l
            WHERE l.node = jobs.owner AND l.shard = jobs.account_id % l.shards AND l.lease_until >= now())))
      ORDER BY created_at LIMIT ${limit}
      FOR UPDATE SKIP LOCKED)
    RETURNING *`
}

/**
 * Renews this shard's lease: every job it owns stays its own while the lease holds (one row
 * per shard, however many jobs it runs). Written before the first claim, then every
 * LEASE_MS / 3.
 */
export async function renewShardLease (sql: Q, node: string, shard: number, shards: number): Promise<void> {
  await sql`INSERT INTO shard_leases (node, shard, shards, lease_until)
    VALUES (${node}, ${shard}, ${shards}, now() + make_interval(secs => ${LEASE_MS / 1000}))
    ON CONFLICT (node, shard) DO UPDATE SET shards = excluded.shards, lease_until = excluded.lease_until`
}

/**
 * Which of `ids` this node still runs (owner and not terminal), read without locks: a job
 * settled by another node (a provider callback there) or taken over while this shard's lease
 * had lapsed is missing from the answer.
 */
export async function heldJobs (sql: Q, node: string, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set()
  const rows = await sql<{ id: string }[]>`SELECT id FROM jobs
    WHERE id = ANY(${textArray(ids)}::text[]) AND owner = ${node} AND status IN ('queued', 'submitted', 'processing')`
  return new Set(rows.map(r => r.id))
}

/**
 * Progress ticks kept in memory, written every few seconds in ONE
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

/** GET /v1/jobs filters; `q` matches part of the prompt (case-insensitive) or a whole job id. */
export interface JobFilter { status?: string; model?: string; type?: string; q?: string; limit: number; offset: number }

export async function listJobs (sql: Q, accountId: number, f: JobFilter): Promise<{ rows: JobRow[]; total: number }> {
  const where = sql`account_id = ${accountId}
    ${f.status ? sql`AND status = ${f.status}` : sql``}
    ${f.model ? sql`AND model = ${f.model}` : sql``}
    ${f.type ? sql`AND type = ${f.type}` : sql``}
    ${f.q ? sql`AND (prompt ILIKE ${'%' + f.q.replace(/[\\%_]/g, m => '\\' + m) + '%'} OR id = ${f.q})` : sql``}`
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
  await tx`INSERT INTO batches (account_id, idempotency_key, request_hash, response) VALUES (${accountId}, ${key}, ${hash}, ${tx.json(jsonOf(response))}) ON CONFLICT DO NOTHING`
}

/** Non-terminal jobs per status (GET /metrics). */
export async function activeJobsByStatus (sql: Q): Promise<Array<{ status: string; n: number }>> {
  return sql<{ status: string; n: number }[]>`SELECT status, count(*)::int AS n FROM jobs WHERE completed_at IS NULL AND status IN ('queued', 'submitted', 'processing') GROUP BY status`
}


/** A job's credit entries (charge, refund), oldest first: its page's timeline. */
export async function jobCreditEntries (sql: Q, accountId: number, jobId: string): Promise<Array<{ kind: string; delta: number; created_at: Date }>> {
  return sql`SELECT kind, delta, created_at FROM credit_entries WHERE account_id = ${accountId} AND job_id = ${jobId} ORDER BY id`
}
