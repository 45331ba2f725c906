import type { Q } from './connect.js'
import { applyCredit } from './accounts.js'
import { chargeAndInsertJob, finishJob, setFreeVideosUsed, insertImage, insertVideo, videoIdOfJob, type NewJob } from './jobs.js'
import { enqueueJobEvent, eventBody } from './outbox.js'
import { appendEvents, eventsJson, insertEventsFrom, recordLateSuccess, setVideoMedia, type RouteRecord, type UpstreamEvent } from './upstream.js'
import { viewOf, type JobRow } from '../jobs/view.js'
import { newEventId } from '../jobs/id.js'

/**
 * The job ledger (issue 12 point 1): every durable write that creates, charges, completes,
 * fails, cancels or refunds a job, each as the statements of one transaction (DESIGN.md 3:
 * a terminal state, its refund and its outbox rows commit together). The shard's account
 * actor calls these inside its group commit; nothing else writes these rows.
 */

/** The job's own webhook (webhook_url + webhook_secret on the request), if any. */
function webhookOf (r: JobRow): { url: string | null; secret: string | null } {
  const q = r.request as { webhook_url?: string | null; webhook_secret?: string | null }
  return { url: q.webhook_url ?? null, secret: q.webhook_secret ?? null }
}

/** The stored provider model string (SPEC.md 2.3 `model`), distinct from the API id. */
function providerModel (r: JobRow): string {
  return `${r.provider}/${r.model}`
}

/** Thrown inside a transaction to roll it back when the conditional charge is refused. */
export class ChargeRefused extends Error {
  constructor () { super('charge refused by the database') }
}

/** An account's balance and free videos used, as a charge left them. */
export interface Balance { credits: number; free_videos_used: number }

/**
 * Creation: conditional charge (balance, and the free video when `row.free_trial`), ledger
 * entry, job row; a job born completed (synchronous voiceover) also writes its outbox rows
 * and library row. Returns the committed balance; throws ChargeRefused (rolling back) when
 * the database refuses the charge.
 */
export async function createJob<B extends Balance = Balance> (
  tx: Q, row: NewJob & JobRow, charged: (b: Balance) => B = b => b as B, record: RouteRecord | null = null
): Promise<B> {
  const c = await chargeAndInsertJob(tx, row, `${row.type} ${row.model}`, record)
  if (c === null) throw new ChargeRefused()
  if (record !== null && record.events.length > 0) await appendEvents(tx, record.events)
  // `charged` sees the balance as soon as the charge answered (the group commit orders balances by it).
  const b = charged(c)
  if (row.status === 'completed') await completionWrites(tx, row, row.result_url!, row.completed_at!)
  return b
}

/** A completed video's library media (issue 11): its thumbnail and its embed page. */
export interface VideoMedia { thumbnailUrl: string | null; embedUrl: (videoId: number) => string }

async function completionWrites (tx: Q, r: JobRow, resultUrl: string, at: Date, media?: VideoMedia): Promise<void> {
  const final: JobRow = { ...r, status: 'completed', progress: 100, result_url: resultUrl, updated_at: at, completed_at: at }
  await enqueueJobEvent(tx, r.account_id, viewOf(final), webhookOf(r), at)
  if (r.type === 'video' || r.type === 'extend') {
    const extendedFrom = r.source_job_id ? await videoIdOfJob(tx, r.source_job_id) : null
    const videoId = await insertVideo(tx, {
      account_id: r.account_id, job_id: r.id, prompt: r.prompt, model: providerModel(r), model_id: r.model,
      aspect_ratio: (r.request.aspect_ratio as string | null) ?? (r.type === 'extend' ? null : '16:9'),
      video_url: resultUrl, extended_from_video_id: extendedFrom, created_at: r.created_at, completed_at: at,
    })
    if (media) await setVideoMedia(tx, videoId, media.thumbnailUrl, media.embedUrl(videoId))
  } else if (r.type === 'image') {
    await insertImage(tx, {
      account_id: r.account_id, job_id: r.id, prompt: r.prompt, model: providerModel(r), model_id: r.model, image_url: resultUrl,
      created_at: r.created_at, completed_at: at
    })
  }
}

/** What a transition records beside the job (issue 11): upstream history, for routes that keep it. */
export interface History { route: string; events: UpstreamEvent[] }

/**
 * completed: terminal state, upstream history, outbox rows, library row (with its media).
 * False when it already was terminal: a late success moves no money and is only recorded.
 */
export async function completeJob (tx: Q, r: JobRow, resultUrl: string, at: Date, o: { history?: History | null; media?: VideoMedia } = {}): Promise<boolean> {
  const ok = await finishJob(tx, r.id, { status: 'completed', progress: 100, result_url: resultUrl, error_message: null, content_policy_violation: false, credits_refunded: 0, at })
  if (!ok) {
    if (o.history) await recordLateSuccess(tx, { job_id: r.id, source: 'late', route: o.history.route, state: 'succeeded', detail: { result_url: resultUrl, note: LATE_NOTE } })
    return false
  }
  if (o.history?.events.length) await appendEvents(tx, o.history.events)
  await completionWrites(tx, r, resultUrl, at, o.media)
  return true
}

/**
 * failed or cancelled: terminal state, outbox rows, full refund with its ledger entry, and the
 * free video given back. Returns the committed balance after the refund (null without one), or
 * false when the job already was terminal.
 */
export async function endJob<B extends { credits: number | null }> (
  tx: Q, r: JobRow, status: 'failed' | 'cancelled', message: string | null, policyViolation: boolean, at: Date, events: UpstreamEvent[] = [],
  refunded: (b: { credits: number | null }) => B = b => b as B
): Promise<B | false> {
  const refund = r.credits_charged
  const ok = await finishJob(tx, r.id, {
    status, progress: r.progress, result_url: null, error_message: message, content_policy_violation: policyViolation, credits_refunded: refund, at
  })
  if (!ok) return false
  if (events.length) await appendEvents(tx, events)
  const final: JobRow = {
    ...r, status, error_message: message, content_policy_violation: policyViolation, credits_refunded: refund, updated_at: at, completed_at: at
  }
  await enqueueJobEvent(tx, r.account_id, viewOf(final), webhookOf(r), at)
  const b = refunded({ credits: refund > 0 ? await applyCredit(tx, r.account_id, refund, 'refund', r.id, `${status} ${r.type} ${r.model}`) : null })
  if (r.free_trial) await setFreeVideosUsed(tx, r.account_id, -1)
  return b
}

/** One completion of a batch written together (completeJobs); `history` for routes that keep it. */
export interface Completion { row: JobRow; resultUrl: string; at: Date; history?: History | null }

const LATE_NOTE = 'upstream success after the job ended; no money moved'
const INSERT_DONE_EVENTS = insertEventsFrom('done d')

/**
 * Many completions in ONE statement (issue 12): the UPDATE of the jobs, and from the rows it
 * moved, the outbox rows (one per active registered webhook subscribed to job.completed, plus
 * the job's own webhook_url) and the image library rows. Each job's event body is built here
 * (it carries the final view); ids of delivery rows are drawn by PostgreSQL. One statement
 * whose text never changes (arrays, not one VALUES row per item), so it is prepared once per
 * connection. A completion's upstream history (a configured route's) is written from the same
 * statement: its events for a job it completes, and for a job that had already failed or been
 * cancelled the `late` success completeJob records. Only videos (their library row carries
 * media keyed by its id) go through completeJob instead. Returns the ids completed now (a job
 * already terminal is left alone and gets no rows).
 */
export async function completeJobs (tx: Q, items: Completion[]): Promise<Set<string>> {
  const n = items.length
  const ids = new Array<string>(n)
  const urls = new Array<string>(n)
  const ats = new Array<string>(n)
  const events = new Array<string>(n)
  const bodies = new Array<string>(n)
  const ownUrls = new Array<string | null>(n)
  const ownSecrets = new Array<string | null>(n)
  const routes = new Array<string | null>(n)
  const histories = new Array<string | null>(n)
  for (let k = 0; k < n; k++) {
    const { row: r, resultUrl, at, history } = items[k]
    routes[k] = history ? history.route : null
    histories[k] = history && history.events.length > 0 ? eventsJson(history.events, at) : null
    const eventId = newEventId()
    const own = webhookOf(r)
    ids[k] = r.id
    urls[k] = resultUrl
    const iso = at.toISOString()
    ats[k] = iso
    events[k] = eventId
    // The final view (viewOf returns a fresh object): what the job is once this commits.
    const v = viewOf(r)
    v.status = 'completed'
    v.progress = 100
    v.result_url = resultUrl
    v.updated_at = iso
    v.completed_at = iso
    bodies[k] = eventBody(eventId, 'job.completed', v, at)
    ownUrls[k] = own.url !== null && own.secret !== null ? own.url : null
    ownSecrets[k] = own.url !== null && own.secret !== null ? own.secret : null
  }
  const done = await tx<{ id: string }[]>`
    WITH v AS (
      SELECT * FROM unnest(${ids}::text[], ${urls}::text[], ${ats}::timestamptz[], ${events}::text[], ${bodies}::text[], ${ownUrls}::text[], ${ownSecrets}::text[],
        ${routes}::text[], ${histories}::text[])
        AS t(id, url, at, event_id, body, own_url, own_secret, route, history)
    ), done AS (
      UPDATE jobs SET status = 'completed', progress = 100, result_url = v.url, error_message = NULL, content_policy_violation = false,
        credits_refunded = 0, updated_at = v.at, completed_at = v.at
      FROM v WHERE jobs.id = v.id AND jobs.status IN ('queued', 'submitted', 'processing')
      RETURNING jobs.id, jobs.account_id, jobs.type, jobs.prompt, jobs.model, jobs.provider, jobs.created_at, v.url, v.at, v.event_id, v.body, v.own_url, v.own_secret,
        v.history
    ), history AS (
      ${tx.unsafe(INSERT_DONE_EVENTS)}
    ), late AS (
      -- Every sub-statement sees the jobs as they were before \`done\`: a job it did not complete
      -- that had failed or been cancelled (refunded) gets the success recorded, no money moves.
      INSERT INTO job_upstream_events (job_id, source, route, state, detail, at)
      SELECT v.id, 'late', v.route, 'succeeded', jsonb_build_object('result_url', v.url, 'note', ${LATE_NOTE}::text), now()
      FROM v JOIN jobs j ON j.id = v.id AND j.status IN ('failed', 'cancelled')
      WHERE v.route IS NOT NULL AND NOT EXISTS (SELECT 1 FROM done WHERE done.id = v.id)
    ), outbox AS (
      -- Delivery ids as src/db/outbox.ts draws them ('dlv_' + 16 base64url characters): 12
      -- random bytes, from two random UUIDs without their version and variant bits.
      INSERT INTO webhook_deliveries (id, event_id, account_id, webhook_id, job_id, event, url, secret, body)
      SELECT 'dlv_' || translate(encode(substring(uuid_send(gen_random_uuid()) FROM 1 FOR 6) || substring(uuid_send(gen_random_uuid()) FROM 11 FOR 6), 'base64'), '+/', '-_'),
        d.event_id, d.account_id, w.id, d.id, 'job.completed', w.url, w.secret, d.body
      FROM done d JOIN webhooks w ON w.account_id = d.account_id AND w.active AND w.deleted_at IS NULL AND 'job.completed' = ANY(w.events)
      UNION ALL
      SELECT 'dlv_' || translate(encode(substring(uuid_send(gen_random_uuid()) FROM 1 FOR 6) || substring(uuid_send(gen_random_uuid()) FROM 11 FOR 6), 'base64'), '+/', '-_'),
        d.event_id, d.account_id, NULL, d.id, 'job.completed', d.own_url, d.own_secret, d.body
      FROM done d WHERE d.own_url IS NOT NULL
    ), library AS (
      INSERT INTO images (account_id, job_id, prompt, model, model_id, image_url, created_at, completed_at)
      SELECT d.account_id, d.id, d.prompt, d.provider || '/' || d.model, d.model, d.url, d.created_at, d.at FROM done d WHERE d.type = 'image'
    )
    SELECT id FROM done`
  return new Set(done.map(u => u.id))
}

// ---- reading the ledger ---------------------------------------------------------------------

export interface LedgerRow { id: number; kind: string; delta: number; job_id: string | null; note: string | null; created_at: Date }

/** One account's credit entries, newest first (GET /v1/credits/ledger). */
export async function listLedger (
  sql: Q, accountId: number, o: { kind?: string; jobId?: string; limit: number; offset: number }
): Promise<{ rows: LedgerRow[]; total: number }> {
  const kind = o.kind ?? null
  const jobId = o.jobId ?? null
  const [rows, [c]] = await Promise.all([
    sql<LedgerRow[]>`
      SELECT id, kind, delta, job_id, note, created_at FROM credit_entries
      WHERE account_id = ${accountId} AND (${kind}::text IS NULL OR kind = ${kind}) AND (${jobId}::text IS NULL OR job_id = ${jobId})
      ORDER BY id DESC LIMIT ${o.limit} OFFSET ${o.offset}`,
    sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM credit_entries
      WHERE account_id = ${accountId} AND (${kind}::text IS NULL OR kind = ${kind}) AND (${jobId}::text IS NULL OR job_id = ${jobId})`,
  ])
  return { rows, total: c.n }
}
