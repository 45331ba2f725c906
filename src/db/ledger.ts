import { newEmbedToken } from '../media/embed.js'
import type { Q } from './connect.js'
import { creationCtes, creationParamCount, creationParams, NO_ROWS, transitionCte, transitionParams, type NewJob, type Transition } from './jobs.js'
import { eventBody } from './outbox.js'
import { appendEvents, eventsJson, insertEventsFrom, type RouteRecord, type UpstreamEvent } from './upstream.js'
import { viewOf, type JobRow } from '../jobs/view.js'
import { newEventId } from '../jobs/id.js'
import { textArray } from './array-literal.js'
import type { ClaimedDelivery } from './webhooks.js'
import { CLAIM_LEASE_S } from '../domain.js'
import { isoOf } from '../util/iso-time.js'

/**
 * The job ledger: every durable write that creates, charges, completes,
 * fails, cancels or refunds a job (docs/architecture.md "Durability": a terminal state, its
 * refund and its outbox rows commit together). Creations, completions and non-terminal status
 * changes have ONE form, the multi-row statement writeBatch, which serves a single row as
 * well; failures and cancellations are endJob. The shard's account actor calls these inside
 * its group commit; nothing else writes these rows.
 */

/** The job's own webhook (webhook_url + webhook_secret on the request), if any. */
function webhookOf (r: JobRow): { url: string | null; secret: string | null } {
  const q = r.request as { webhook_url?: string | null; webhook_secret?: string | null }
  return { url: q.webhook_url ?? null, secret: q.webhook_secret ?? null }
}

/** Raised when the database refuses a creation's conditional charge (balance, or the free video already used). */
export class ChargeRefused extends Error {
  constructor () { super('charge refused by the database') }
}

/** An account's balance and free videos used, as a charge left them. */
export interface Balance { credits: number; free_videos_used: number }

/** A completed video's library media: its thumbnail and its embed page (URL from the page's random token). */
export interface VideoMedia { thumbnailUrl: string | null; embedUrl: (token: string) => string }

/** What a transition records beside the job: upstream history, for routes that keep it. */
export interface History { route: string; events: UpstreamEvent[] }

const LATE_NOTE = 'upstream success after the job ended; no money moved'

/** The outbox row id as src/db/outbox.ts draws it ('dlv_' + 16 base64url characters): 12 random bytes of two random UUIDs. */
const DELIVERY_ID = `'dlv_' || translate(encode(substring(uuid_send(gen_random_uuid()) FROM 1 FOR 6) || substring(uuid_send(gen_random_uuid()) FROM 11 FOR 6), 'base64'), '+/', '-_')`

/** A handed row's claim: the pools' own lease. */
const HANDED_CLAIM = `now() + interval '${CLAIM_LEASE_S} seconds'`

/**
 * The outbox INSERT of a statement's terminal jobs: `from` names a relation with the job (`id`,
 * `account_id`), its event (`event_id`, `body`; no rows when event_id is NULL) and its own
 * webhook (`own_url`, `own_secret`; NULL for none). One row per active registered webhook of
 * the account subscribed to `event`, plus one for the job's own webhook. `handed`: the rows are
 * inserted claimed for the claim lease and returned (id, job, webhook, URL and secret), for the
 * node to hand to its delivery worker in memory (docs/architecture.md "Durability", the outbox).
 * `guarded` (completions): a job sent without its event (its account believed to have no
 * webhook, HooklessAccounts) whose account has one subscribed tries to insert a row without
 * event and body, and the NOT NULL columns fail the whole statement (isStaleHookless): the event
 * is never lost, the batch is written again with every event built.
 */
function insertOutboxFrom (from: string, event: 'job.completed' | 'job.failed', handed = false, guarded = false): string {
  const claim = handed ? `, ${HANDED_CLAIM}` : ''
  return `INSERT INTO webhook_deliveries (id, event_id, account_id, webhook_id, job_id, event, url, secret, body${handed ? ', claimed_until' : ''})
      SELECT ${DELIVERY_ID}, d.event_id, d.account_id, w.id, d.id, '${event}', w.url, w.secret, d.body${claim}
      FROM ${from} JOIN webhooks w ON w.account_id = d.account_id AND w.active AND w.deleted_at IS NULL AND '${event}' = ANY(w.events)${guarded ? '' : `
      WHERE d.event_id IS NOT NULL`}
      UNION ALL
      SELECT ${DELIVERY_ID}, d.event_id, d.account_id, NULL, d.id, '${event}', d.own_url, d.own_secret, d.body${claim}
      FROM ${from} WHERE d.event_id IS NOT NULL AND d.own_url IS NOT NULL${handed ? `
      RETURNING id, job_id, webhook_id, url, secret` : ''}`
}

/**
 * endJob's one statement: the job made terminal (only from a non-terminal state), its upstream
 * events, a failure's outbox rows (registered webhooks subscribed to job.failed, and the job's
 * own webhook), the refund with its ledger entry and the free video given back (one UPDATE of
 * the account: a statement may change a row once). $1 id, $2 status, $3 progress, $4 message,
 * $5 policy flag, $6 refund, $7 time, $8 event id (NULL: no event), $9 event body, $10 free
 * trial, $11 events (eventsJson, NULL for none), $12/$13 own webhook url/secret, $14 ledger note.
 */
const END_JOB = `WITH done AS (
      UPDATE jobs SET status = $2::text, progress = $3::int, result_url = NULL, error_message = $4::text, content_policy_violation = $5::boolean,
        credits_refunded = $6::int, updated_at = $7::timestamptz, completed_at = $7::timestamptz
      WHERE id = $1::text AND status IN ('queued', 'submitted', 'processing')
      RETURNING jobs.id, jobs.account_id, $11::text AS history, $8::text AS event_id, $9::text AS body, $12::text AS own_url, $13::text AS own_secret
    ), history AS (
      ${insertEventsFrom('done d')}
    ), outbox AS (
      ${insertOutboxFrom('done d', 'job.failed')}
    ), acct AS (
      UPDATE accounts a SET credits = a.credits + $6::int,
        free_videos_used = CASE WHEN $10::boolean THEN greatest(0, a.free_videos_used - 1) ELSE a.free_videos_used END,
        updated_at = CASE WHEN $6::int > 0 THEN now() ELSE a.updated_at END
      FROM done d WHERE a.id = d.account_id AND ($6::int > 0 OR $10::boolean)
      RETURNING a.id, a.credits
    ), entry AS (
      INSERT INTO credit_entries (account_id, delta, kind, job_id, note)
      SELECT acct.id, $6::int, 'refund', $1::text, $14::text FROM acct WHERE $6::int > 0
    )
    SELECT (SELECT count(*) FROM done)::int AS ended, (SELECT credits FROM acct) AS credits`

/**
 * failed or cancelled: terminal state, outbox rows, full refund with its ledger entry, and the
 * free video given back, in one statement (END_JOB: one round trip where it took three to
 * five). Returns the committed balance after the refund (null without one), or false when the
 * job already was terminal.
 */
export async function endJob<B extends { credits: number | null }> (
  tx: Q, r: JobRow, status: 'failed' | 'cancelled', message: string | null, policyViolation: boolean, at: Date, events: UpstreamEvent[] = [],
  refunded: (b: { credits: number | null }) => B = b => b as B
): Promise<B | false> {
  const refund = r.credits_charged
  // Cancelled jobs have no event (docs/api.md "Webhooks"); a failure's body carries the final view.
  let eventId: string | null = null
  let body: string | null = null
  if (status === 'failed') {
    const final: JobRow = {
      ...r, status, error_message: message, content_policy_violation: policyViolation, credits_refunded: refund, updated_at: at, completed_at: at
    }
    eventId = newEventId()
    body = eventBody(eventId, 'job.failed', viewOf(final), at)
  }
  const own = webhookOf(r)
  const ownUrl = own.url !== null && own.secret !== null ? own.url : null
  // Events of another job (none are passed today) would be written under this one's id.
  const mine = events.every(e => e.job_id === r.id)
  // Typed values: postgres.js serialises each by the parameter type PostgreSQL described (a
  // string 'true' for a boolean would go as false).
  const params: Array<string | number | boolean | Date | null> = [
    r.id, status, r.progress, message, policyViolation, refund, at, eventId, body, r.free_trial,
    mine && events.length > 0 ? eventsJson(events, at) : null, ownUrl, ownUrl !== null ? own.secret : null, `${status} ${r.type} ${r.model}`,
  ]
  const [row] = await tx.unsafe<Array<{ ended: number; credits: number | null }>>(END_JOB, params as never[], { prepare: true })
  if (row.ended === 0) return false
  if (!mine) await appendEvents(tx, events)
  return refunded({ credits: refund > 0 && row.credits !== null ? Number(row.credits) : null })
}

/**
 * One completion of a batch (writeBatch): `history` for routes that keep it, `media` for a
 * video's library row (its thumbnail and embed page).
 */
export interface Completion { row: JobRow; resultUrl: string; at: Date; history?: History | null; media?: VideoMedia }

const INSERT_DONE_EVENTS = insertEventsFrom('done d')

/** Is this completion's library row a video (videos table, with media) rather than an image? */
const isVideo = (r: JobRow): boolean => r.type === 'video' || r.type === 'extend'

/**
 * The CTEs of a batch's completions (writeBatch), from 9 array parameters after `offset`
 * (completionParams), 13 when `videos`: the UPDATE of the jobs (`done`: the ids it completed;
 * a job already terminal is left alone and gets no rows), and from the rows it moved, the
 * outbox rows (one per active registered webhook subscribed to job.completed, plus the job's
 * own webhook_url) and the library rows (an image's; a video's with its aspect ratio, the
 * video it extends, its thumbnail and embed page). Each job's event body is built by the
 * caller (it carries the final view); ids of delivery rows are drawn by PostgreSQL. A
 * completion's upstream history (a configured route's) is written here too: its events for a
 * job it completes, and for a job that had already failed or been cancelled the `late`
 * success (no money moves).
 */
function completionCtes (offset: number, videos: boolean, handed: boolean): string {
  const p = (k: number) => `$${offset + k}`
  return `v AS (
      SELECT * FROM unnest(${p(1)}::text[], ${p(2)}::text[], ${p(3)}::timestamptz[], ${p(4)}::text[], ${p(5)}::text[], ${p(6)}::text[], ${p(7)}::text[],
        ${p(8)}::text[], ${p(9)}::text[]${videos ? `, ${p(10)}::text[], ${p(11)}::text[], ${p(12)}::text[], ${p(13)}::text[]` : ''})
        AS t(id, url, at, event_id, body, own_url, own_secret, route, history${videos ? ', aspect, thumb, token, embed' : ''})
    ), done AS (
      UPDATE jobs SET status = 'completed', progress = 100, result_url = v.url, error_message = NULL, content_policy_violation = false,
        credits_refunded = 0, updated_at = v.at, completed_at = v.at
      FROM v WHERE jobs.id = v.id AND jobs.status IN ('queued', 'submitted', 'processing')
      RETURNING jobs.id, jobs.account_id, jobs.type, jobs.prompt, jobs.model, jobs.provider, jobs.created_at, v.url, v.at, v.event_id, v.body, v.own_url, v.own_secret,
        v.history${videos ? ', jobs.source_job_id, v.aspect, v.thumb, v.token, v.embed' : ''},
        EXISTS (SELECT 1 FROM webhooks w WHERE w.account_id = jobs.account_id AND w.active AND w.deleted_at IS NULL
          AND 'job.completed' = ANY(w.events)) AS hooks
    ), history AS (
      ${INSERT_DONE_EVENTS}
    ), late AS (
      -- Every sub-statement sees the jobs as they were before the statement: a job the UPDATE
      -- did not complete that had failed or been cancelled (refunded) gets the success recorded, no money moves.
      INSERT INTO job_upstream_events (job_id, source, route, state, detail, at)
      SELECT v.id, 'late', v.route, 'succeeded', jsonb_build_object('result_url', v.url, 'note', '${LATE_NOTE}'::text), now()
      FROM v JOIN jobs lj ON lj.id = v.id AND lj.status IN ('failed', 'cancelled')
      WHERE v.route IS NOT NULL AND NOT EXISTS (SELECT 1 FROM done WHERE done.id = v.id)
    ), outbox AS (
      ${insertOutboxFrom('done d', 'job.completed', handed, true)}
    ), library AS (
      INSERT INTO images (account_id, job_id, prompt, model, model_id, image_url, created_at, completed_at)
      SELECT d.account_id, d.id, d.prompt, d.provider || '/' || d.model, d.model, d.url, d.created_at, d.at FROM done d WHERE d.type = 'image'
    )${videos ? `, videos AS (
      INSERT INTO videos (account_id, job_id, prompt, model, model_id, aspect_ratio, video_url, extended_from_video_id, created_at, completed_at,
        thumbnail_url, embed_token, embed_url)
      SELECT d.account_id, d.id, d.prompt, d.provider || '/' || d.model, d.model, d.aspect, d.url,
        (SELECT sv.id FROM videos sv WHERE sv.job_id = d.source_job_id), d.created_at, d.at, d.thumb, d.token, d.embed
      FROM done d WHERE d.type IN ('video', 'extend')
    )` : ''}`
}

/**
 * completionCtes' parameters: per completion its final view in the event body (none, and no
 * event, for an account `hookless` knows has no webhook and a job without its own), its own
 * webhook, its history, and with `videos` a video's aspect ratio and media (its embed page
 * under a fresh random token).
 */
function completionParams (items: Completion[], videos: boolean, hookless: HooklessAccounts | null): {
  params: string[]; events: Array<string | null>; bodies: Array<string | null>
} {
  const n = items.length
  const ids = new Array<string>(n)
  const urls = new Array<string>(n)
  const ats = new Array<string>(n)
  const events = new Array<string | null>(n)
  const bodies = new Array<string | null>(n)
  const ownUrls = new Array<string | null>(n)
  const ownSecrets = new Array<string | null>(n)
  const routes = new Array<string | null>(n)
  const histories = new Array<string | null>(n)
  for (let k = 0; k < n; k++) {
    const { row: r, resultUrl, at, history } = items[k]
    routes[k] = history ? history.route : null
    histories[k] = history && history.events.length > 0 ? eventsJson(history.events, at) : null
    const own = webhookOf(r)
    const ownHook = own.url !== null && own.secret !== null
    ids[k] = r.id
    urls[k] = resultUrl
    const iso = isoOf(at)
    ats[k] = iso
    ownUrls[k] = ownHook ? own.url : null
    ownSecrets[k] = ownHook ? own.secret : null
    // No webhook can want the event (none of its own, none registered when the account's last
    // completion committed): neither view nor body is built (the statement's guard catches a
    // webhook registered since).
    if (!ownHook && hookless !== null && hookless.has(Number(r.account_id))) { events[k] = null; bodies[k] = null; continue }
    const eventId = newEventId()
    events[k] = eventId
    // The final view (viewOf returns a fresh object): what the job is once this commits.
    const v = viewOf(r)
    v.status = 'completed'
    v.progress = 100
    v.result_url = resultUrl
    v.updated_at = iso
    v.completed_at = iso
    bodies[k] = eventBody(eventId, 'job.completed', v, at)
  }
  const params = [textArray(ids), textArray(urls), textArray(ats), textArray(events), textArray(bodies), textArray(ownUrls), textArray(ownSecrets),
    textArray(routes), textArray(histories)]
  if (!videos) return { params, events, bodies }
  const aspects = new Array<string | null>(n).fill(null)
  const thumbs = new Array<string | null>(n).fill(null)
  const tokens = new Array<string | null>(n).fill(null)
  const embeds = new Array<string | null>(n).fill(null)
  for (let k = 0; k < n; k++) {
    const { row: r, media } = items[k]
    if (!isVideo(r)) continue
    const ar = r.request.aspect_ratio as string | null | undefined
    aspects[k] = ar != null ? String(ar) : r.type === 'extend' ? null : '16:9'
    if (media) {
      const token = newEmbedToken()
      thumbs[k] = media.thumbnailUrl
      tokens[k] = token
      embeds[k] = media.embedUrl(token)
    }
  }
  params.push(textArray(aspects), textArray(thumbs), textArray(tokens), textArray(embeds))
  return { params, events, bodies }
}

/** What one group commit writes in one statement (writeBatch). */
export interface BatchWrite {
  /**
   * Creations, with their route (`records[k]`, or null). A creation born completed is written
   * here as running; its completion follows in a second statement of the same transaction
   * (the group commit's), as one statement cannot update the row it inserts.
   */
  creations: NewJob[]
  records: ReadonlyArray<RouteRecord | null>
  /** Completions. */
  completions: Completion[]
  /** Non-terminal status changes, at most one per job and none of a job completed here. */
  transitions: Transition[]
}

/**
 * What writeBatch committed: per charged account its balance after all its creations; the ids
 * completed now; with `handOff`, the outbox rows of those completions, inserted claimed for this
 * node (empty otherwise).
 */
export interface BatchWritten { charged: Map<number, Balance>; completed: Set<string>; handed: ClaimedDelivery[] }

/**
 * Accounts that had no webhook subscribed to job.completed when one of their completions last
 * committed (the completion statement says so for each job it completes): their completions
 * are written without the event's view and body (docs/decisions.md "Completion events built
 * only where a webhook may want them"). A webhook registered since is caught by the statement
 * itself (insertOutboxFrom's guard): the batch fails (isStaleHookless), the caller forgets
 * what it knew and writes the batch again, every event built.
 */
export class HooklessAccounts {
  private readonly none = new Set<number>()
  /** `max`: accounts remembered at most (then forgotten all at once: they are learnt again). */
  constructor (private readonly max = 100_000) {}
  has (account: number): boolean { return this.none.has(account) }
  /** What a committed completion of `account` found: `hooks`, a webhook subscribed to job.completed. */
  saw (account: number, hooks: boolean): void {
    if (hooks) { this.none.delete(account); return }
    if (this.none.size >= this.max) this.none.clear()
    this.none.add(account)
  }

  forget (): void { this.none.clear() }
  get size (): number { return this.none.size }
}

/** The completion statement failed because an account believed without webhooks has one (insertOutboxFrom's guard): nothing was written. */
export function isStaleHookless (err: unknown): boolean {
  const e = err as { code?: string; table_name?: string; column_name?: string } | null
  return e?.code === '23502' && e.table_name === 'webhook_deliveries' && (e.column_name === 'event_id' || e.column_name === 'body')
}

/**
 * writeBatch's statements by what they hold: creations 0 none, 1 plain, 2 routed; completions
 * (x3) 0 none, 1 without videos, 2 with videos; transitions (x9) 0 or 1; completions' outbox
 * rows handed (x18) or not.
 */
const STATEMENTS: Array<string | undefined> = new Array(36)

/** The extra result columns of a statement that hands outbox rows: NULL on rows that are not one. */
const NO_DELIVERY = ', NULL::text AS delivery, NULL::bigint AS webhook, NULL::text AS url, NULL::text AS secret'

function batchStatement (creations: 0 | 1 | 2, completions: 0 | 1 | 2, transitions: boolean, handed: boolean): string {
  handed &&= completions > 0
  const key = creations + completions * 3 + (transitions ? 9 : 0) + (handed ? 18 : 0)
  let text = STATEMENTS[key]
  if (text !== undefined) return text
  const ctes: string[] = []
  const out: string[] = []
  const none = handed ? NO_DELIVERY : ''
  let offset = 0
  if (creations > 0) {
    ctes.push(creationCtes(creations === 2, offset))
    offset += creationParamCount(creations === 2)
    out.push(`SELECT id AS account, credits, free_videos_used, NULL::text AS job, NULL::boolean AS hooks${none} FROM charged`)
  }
  if (completions > 0) {
    ctes.push(completionCtes(offset, completions === 2, handed))
    offset += completions === 2 ? 13 : 9
    out.push(`SELECT account_id AS account, NULL::bigint AS credits, NULL::int AS free_videos_used, id AS job, hooks${none} FROM done`)
    if (handed) out.push('SELECT NULL::bigint, NULL::bigint, NULL::int, job_id, NULL::boolean, id, webhook_id, url, secret FROM outbox')
  }
  if (transitions) ctes.push(transitionCte(offset))
  if (out.length === 0) out.push(NO_ROWS)
  text = `WITH ${ctes.join(',\n    ')}\n    ${out.join('\n    UNION ALL ')}`
  STATEMENTS[key] = text
  return text
}

/**
 * A group commit's creations, completions and transitions in ONE statement (
 * docs/architecture.md "Durability"; docs/decisions.md "One statement per group commit"): one statement is its own
 * transaction, so a batch of only these needs no BEGIN and COMMIT round trips, and inside a
 * transaction it is one statement instead of three. It is also the one form of these writes
 * for a single row (docs/decisions.md "One SQL form per write"). Each part's rows cross as
 * column arrays (unnest); the text depends only on which parts the batch has (18 variants,
 * each prepared once per connection). Its parts touch different rows: creations insert new
 * jobs, completions and transitions update jobs committed before, never the same one twice
 * (the caller drops a transition its batch supersedes).
 */
export async function writeBatch (q: Q, w: BatchWrite, handOff = false, hookless: HooklessAccounts | null = null): Promise<BatchWritten> {
  const c = w.creations.length > 0 ? creationParams(w.creations, w.records) : null
  const videos = w.completions.some(x => isVideo(x.row))
  const params: string[] = []
  if (c !== null) for (const x of c.params) params.push(x)
  const done = w.completions.length > 0 ? completionParams(w.completions, videos, hookless) : null
  if (done !== null) for (const x of done.params) params.push(x)
  if (w.transitions.length > 0) for (const x of transitionParams(w.transitions)) params.push(x)
  const text = batchStatement(c === null ? 0 : c.routed ? 2 : 1, w.completions.length === 0 ? 0 : videos ? 2 : 1, w.transitions.length > 0, handOff)
  type Row = {
    account: number | null; credits: number | null; free_videos_used: number | null; job: string | null; hooks: boolean | null
    delivery?: string | null; webhook?: string | null; url?: string; secret?: string
  }
  const rows = await q.unsafe<Row[]>(text, params, { prepare: true })
  const charged = new Map<number, Balance>()
  const completed = new Set<string>()
  const handed: ClaimedDelivery[] = []
  let index: Map<string, number> | null = null
  for (const r of rows) {
    if (r.delivery == null) {
      if (r.job !== null) {
        completed.add(r.job)
        hookless?.saw(Number(r.account), r.hooks === true)
      } else {
        charged.set(Number(r.account), { credits: r.credits!, free_videos_used: r.free_videos_used! })
      }
      continue
    }
    // A handed row as a pool's claim returns it, with the event id and body built here for its job.
    if (index === null) { index = new Map(); for (let k = 0; k < w.completions.length; k++) index.set(w.completions[k].row.id, k) }
    const k = index.get(r.job!)!
    handed.push({
      id: r.delivery, event_id: done!.events[k]!, account_id: Number(w.completions[k].row.account_id), webhook_id: r.webhook == null ? null : Number(r.webhook),
      job_id: r.job, event: 'job.completed', url: r.url!, secret: r.secret!, body: done!.bodies[k]!, attempts: 0, hook_active: true,
    })
  }
  return { charged, completed, handed }
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
