import { randomBytes } from 'node:crypto'
import type { Q } from './connect.js'
import type { JobView } from '../jobs/view.js'
import { isoOf } from '../util/iso-time.js'

export type WebhookEvent = 'job.completed' | 'job.failed'

/** The delivery body of docs/api.md "Webhooks": `{id: "evt_...", type, created_at, data: {job}}`. */
export function eventBody (eventId: string, type: WebhookEvent, job: JobView, at: Date): string {
  return JSON.stringify({ id: eventId, type, created_at: isoOf(at), data: { job } })
}

/**
 * Writes the outbox rows of a terminal job in the caller's transaction (the same one that
 * makes the job terminal): one per active registered webhook subscribed to the event, plus one
 * for the job's own webhook_url. Cancelled jobs have no event (docs/api.md "Webhooks"). Returns the count.
 */
export async function enqueueJobEvent (
  tx: Q, accountId: number, job: JobView, perJob: { url: string | null; secret: string | null }, at: Date
): Promise<number> {
  if (job.status !== 'completed' && job.status !== 'failed') return 0
  const type: WebhookEvent = job.status === 'completed' ? 'job.completed' : 'job.failed'
  const eventId = `evt_${randomBytes(12).toString('base64url')}`
  const body = eventBody(eventId, type, job, at)
  const hooks = await tx<{ id: number; url: string; secret: string }[]>`
    SELECT id, url, secret FROM webhooks
    WHERE account_id = ${accountId} AND active AND deleted_at IS NULL AND ${type} = ANY(events)`
  const rows: Array<{ id: string; event_id: string; account_id: number; webhook_id: number | null; job_id: string; event: WebhookEvent; url: string; secret: string; body: string }> = hooks.map(h => ({ id: `dlv_${randomBytes(12).toString('base64url')}`, event_id: eventId, account_id: accountId, webhook_id: h.id, job_id: job.id, event: type, url: h.url, secret: h.secret, body }))
  if (perJob.url && perJob.secret) {
    rows.push({ id: `dlv_${randomBytes(12).toString('base64url')}`, event_id: eventId, account_id: accountId, webhook_id: null, job_id: job.id, event: type, url: perJob.url, secret: perJob.secret, body })
  }
  if (rows.length === 0) return 0
  await tx`INSERT INTO webhook_deliveries ${tx(rows, 'id', 'event_id', 'account_id', 'webhook_id', 'job_id', 'event', 'url', 'secret', 'body')}`
  return rows.length
}

/** Outbox lag (age of the oldest due delivery, s) and pending rows (GET /metrics). */
export async function outboxLag (sql: Q): Promise<{ lag: number | null; pending: number } | undefined> {
  const [r] = await sql<{ lag: number | null; pending: number }[]>`
    SELECT extract(epoch FROM now() - min(next_attempt_at) FILTER (WHERE next_attempt_at <= now()))::float8 AS lag, count(*)::int AS pending
    FROM webhook_deliveries WHERE status = 'pending'`
  return r
}
