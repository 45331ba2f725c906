import type { Q, Sql } from './connect.js'

/** A `webhooks` row (sql/0004_webhooks.sql). The secret never leaves src/db and the worker. */
export interface WebhookRow {
  id: number
  account_id: number
  url: string
  secret: string
  events: string[]
  active: boolean
  disabled_reason: string | null
  created_at: Date
  deleted_at: Date | null
}

/** Active webhooks per account (docs/api.md "Webhooks"). */
export const MAX_ACTIVE_WEBHOOKS = 5

/**
 * Inserts a webhook unless the account already has MAX_ACTIVE_WEBHOOKS active ones. The account
 * row is locked first, so concurrent registrations cannot both pass the count. Null at the limit.
 */
export async function insertWebhook (sql: Sql, w: { accountId: number; url: string; secret: string; events: string[] }): Promise<WebhookRow | null> {
  return sql.begin(async (tx) => {
    await tx`SELECT id FROM accounts WHERE id = ${w.accountId} FOR UPDATE`
    const [{ n }] = await tx<{ n: number }[]>`
      SELECT count(*)::int AS n FROM webhooks WHERE account_id = ${w.accountId} AND active AND deleted_at IS NULL`
    if (n >= MAX_ACTIVE_WEBHOOKS) return null
    const [row] = await tx<WebhookRow[]>`
      INSERT INTO webhooks (account_id, url, secret, events)
      VALUES (${w.accountId}, ${w.url}, ${w.secret}, ${w.events}::text[]) RETURNING *`
    return row
  }) as Promise<WebhookRow | null>
}

/** The caller's webhooks that are not deleted (active or disabled by a 410), newest first. */
export async function listWebhooks (sql: Q, accountId: number, limit: number, offset: number): Promise<{ rows: WebhookRow[]; total: number }> {
  const [rows, [{ n }]] = await Promise.all([
    sql<WebhookRow[]>`
      SELECT * FROM webhooks WHERE account_id = ${accountId} AND deleted_at IS NULL
      ORDER BY created_at DESC, id DESC LIMIT ${limit} OFFSET ${offset}`,
    sql<{ n: number }[]>`SELECT count(*)::int AS n FROM webhooks WHERE account_id = ${accountId} AND deleted_at IS NULL`,
  ])
  return { rows, total: n }
}

export async function getWebhook (sql: Q, accountId: number, id: number): Promise<WebhookRow | undefined> {
  const [row] = await sql<WebhookRow[]>`SELECT * FROM webhooks WHERE id = ${id} AND account_id = ${accountId} AND deleted_at IS NULL`
  return row
}

/**
 * Soft delete (deleted_at) and, in the same transaction, disables the webhook's pending
 * deliveries so nothing more is sent to it. False when no undeleted webhook of the account
 * has that id.
 */
export async function deleteWebhook (sql: Sql, accountId: number, id: number): Promise<boolean> {
  return sql.begin(async (tx) => {
    const [row] = await tx<{ id: number }[]>`
      UPDATE webhooks SET deleted_at = now(), active = false, disabled_reason = coalesce(disabled_reason, 'deleted')
      WHERE id = ${id} AND account_id = ${accountId} AND deleted_at IS NULL RETURNING id`
    if (!row) return false
    await tx`
      UPDATE webhook_deliveries SET status = 'disabled', claimed_until = NULL, last_error = 'webhook deleted before delivery'
      WHERE webhook_id = ${id} AND status = 'pending'`
    return true
  }) as Promise<boolean>
}

/** A `webhook_deliveries` row as GET /v1/webhooks/{id}/deliveries shows it. */
export interface DeliveryView {
  id: string
  event: string
  event_id: string
  job_id: string | null
  status: string
  attempts: number
  /** The signed body, byte for byte as sent. */
  body: string
  last_status_code: number | null
  last_error: string | null
  last_latency_ms: number | null
  next_attempt_at: Date
  created_at: Date
  delivered_at: Date | null
}

export interface AttemptView {
  delivery_id: string
  attempt: number
  attempted_at: Date
  status_code: number | null
  latency_ms: number | null
  error: string | null
  response_excerpt: string | null
  manual: boolean
}

/** One webhook's deliveries, newest first, with every attempt of each (at most MAX_ATTEMPTS). */
export async function listDeliveries (sql: Q, webhookId: number, o: {
  status?: string; limit: number; offset: number
}): Promise<{ rows: DeliveryView[]; attempts: AttemptView[]; total: number }> {
  const status = o.status ?? null
  const [rows, [{ n }]] = await Promise.all([
    sql<DeliveryView[]>`
      SELECT id, event, event_id, job_id, status, attempts, body, last_status_code, last_error, last_latency_ms,
        next_attempt_at, created_at, delivered_at
      FROM webhook_deliveries
      WHERE webhook_id = ${webhookId} AND (${status}::text IS NULL OR status = ${status})
      ORDER BY created_at DESC, id DESC LIMIT ${o.limit} OFFSET ${o.offset}`,
    sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM webhook_deliveries WHERE webhook_id = ${webhookId} AND (${status}::text IS NULL OR status = ${status})`,
  ])
  const ids = rows.map(r => r.id)
  const attempts = ids.length === 0
    ? []
    : await sql<AttemptView[]>`
      SELECT delivery_id, attempt, attempted_at, status_code, latency_ms, error, response_excerpt, manual FROM webhook_attempts
      WHERE delivery_id = ANY(${ids}::text[]) ORDER BY delivery_id, attempt, id`
  return { rows, attempts, total: n }
}

// ---- Manual sends: test events, redelivery, secret rotation (docs/webhook-tools.md) ---------

/**
 * A new signing secret for a webhook. Deliveries still pending take it too (same transaction),
 * so a receiver that switched to the new secret verifies their retries; answered ones keep
 * the secret they were signed with. Undefined when no undeleted webhook of the account has that id.
 */
export async function rotateWebhookSecret (sql: Sql, accountId: number, id: number, secret: string): Promise<WebhookRow | undefined> {
  return sql.begin(async (tx) => {
    const [row] = await tx<WebhookRow[]>`
      UPDATE webhooks SET secret = ${secret} WHERE id = ${id} AND account_id = ${accountId} AND deleted_at IS NULL RETURNING *`
    if (!row) return undefined
    await tx`UPDATE webhook_deliveries SET secret = ${secret} WHERE webhook_id = ${id} AND status = 'pending'`
    return row
  }) as Promise<WebhookRow | undefined>
}

/** A delivery a manual send works on (the columns the signer needs and its state before). */
export interface ManualDelivery {
  id: string
  event: string
  event_id: string
  webhook_id: number
  job_id: string | null
  url: string
  secret: string
  body: string
  status: 'pending' | 'delivered' | 'failed' | 'disabled'
  attempts: number
}

/**
 * Writes a `webhook.test` delivery already claimed for `leaseSeconds`: the API sends it at once
 * (sendNow) and records the answer; the pool only takes it if that never happens (the process
 * died mid-send), like any lapsed claim.
 */
export async function insertTestDelivery (sql: Q, d: {
  id: string; eventId: string; accountId: number; webhookId: number; url: string; secret: string; body: string; leaseSeconds: number
}): Promise<ManualDelivery> {
  const [row] = await sql<ManualDelivery[]>`
    INSERT INTO webhook_deliveries (id, event_id, account_id, webhook_id, job_id, event, url, secret, body, claimed_until)
    VALUES (${d.id}, ${d.eventId}, ${d.accountId}, ${d.webhookId}, NULL, 'webhook.test', ${d.url}, ${d.secret}, ${d.body},
      now() + make_interval(secs => ${d.leaseSeconds}::float8))
    RETURNING id, event, event_id, webhook_id::int AS webhook_id, job_id, url, secret, body, status, attempts`
  return row
}

/**
 * Claims one delivery of a webhook for a manual redelivery. A pending row the pool holds right
 * now (its claim has not lapsed) is `busy`: sending it here too would race the attempt in
 * flight. Rows in any other state are taken whatever their stale claim says. The URL is the
 * webhook's current one (it may have been fixed since), the body the same signed bytes.
 */
export async function claimForRedelivery (sql: Q, webhookId: number, deliveryId: string, leaseSeconds: number): Promise<ManualDelivery | 'busy' | undefined> {
  const [row] = await sql<Array<ManualDelivery & { taken: boolean }>>`
    WITH cur AS (
      SELECT d.id FROM webhook_deliveries d WHERE d.id = ${deliveryId} AND d.webhook_id = ${webhookId} FOR UPDATE
    ), taken AS (
      UPDATE webhook_deliveries d SET claimed_until = now() + make_interval(secs => ${leaseSeconds}::float8)
      FROM cur WHERE d.id = cur.id AND (d.status <> 'pending' OR d.claimed_until IS NULL OR d.claimed_until < now())
      RETURNING d.id
    )
    SELECT d.id, d.event, d.event_id, d.webhook_id::int AS webhook_id, d.job_id, w.url, w.secret, d.body, d.status, d.attempts,
      EXISTS (SELECT 1 FROM taken) AS taken
    FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id WHERE d.id = (SELECT id FROM cur)`
  if (!row) return undefined
  if (!row.taken) return 'busy'
  const { taken: _, ...d } = row
  return d
}

/** One manual attempt's result and the delivery's state after it (decided by the caller). */
export interface ManualAttempt {
  deliveryId: string
  webhookId: number
  attempt: number
  attemptedAt: Date
  statusCode: number | null
  latencyMs: number | null
  error: string | null
  excerpt: string | null
  status: 'pending' | 'delivered' | 'failed' | 'disabled'
  /** When pending: the next automatic attempt is due this many ms from now. */
  delayMs: number | null
  /** A 410: deactivate the webhook with this reason (as the pool does). */
  disableWebhook: string | null
}

/** Records a manual attempt (flagged `manual`) and the delivery's new state, releasing the claim. */
export async function recordManualAttempt (sql: Sql, a: ManualAttempt): Promise<void> {
  const clean = (v: string | null) => v === null ? null : v.replace(/\0/g, '')
  await sql.begin(async (tx) => {
    await tx`
      INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, status_code, latency_ms, error, response_excerpt, manual)
      VALUES (${a.deliveryId}, ${a.attempt}, ${a.attemptedAt}, ${a.statusCode}, ${a.latencyMs}, ${clean(a.error)}, ${clean(a.excerpt)}, true)`
    await tx`
      UPDATE webhook_deliveries SET
        attempts = greatest(attempts, ${a.attempt}), status = ${a.status}, claimed_until = NULL,
        last_status_code = ${a.statusCode}, last_latency_ms = ${a.latencyMs}, last_error = ${clean(a.error)},
        next_attempt_at = CASE WHEN ${a.status}::text = 'pending'
          THEN clock_timestamp() + make_interval(secs => ${(a.delayMs ?? 0) / 1000}::float8) ELSE next_attempt_at END,
        delivered_at = CASE WHEN ${a.status}::text = 'delivered'
          THEN coalesce(delivered_at, ${new Date(a.attemptedAt.getTime() + (a.latencyMs ?? 0))}::timestamptz) ELSE delivered_at END
      WHERE id = ${a.deliveryId}`
    if (a.disableWebhook !== null) {
      await tx`UPDATE webhooks SET active = false, disabled_reason = ${a.disableWebhook} WHERE id = ${a.webhookId} AND active`
      await tx`
        UPDATE webhook_deliveries SET status = 'disabled', claimed_until = NULL, last_error = ${'webhook disabled: ' + a.disableWebhook}
        WHERE webhook_id = ${a.webhookId} AND status = 'pending' AND id <> ${a.deliveryId}`
    }
  })
}

/** A delivery that keeps failing, for the operator (GET /v1/admin/deliveries). */
export interface FailingDelivery {
  id: string
  account_id: number
  webhook_id: number | null
  job_id: string | null
  event: string
  url: string
  status: string
  attempts: number
  last_status_code: number | null
  last_error: string | null
  next_attempt_at: Date
  created_at: Date
}

/**
 * Deliveries of every account that failed for good (`failed`) or are being retried after at
 * least one failed attempt (`retrying`), newest first; `both` for either.
 */
export async function listFailingDeliveries (sql: Q, o: { which: 'failed' | 'retrying' | 'both'; limit: number; offset: number }): Promise<{ rows: FailingDelivery[]; total: number }> {
  const where = o.which === 'failed'
    ? sql`status = 'failed'`
    : o.which === 'retrying' ? sql`status = 'pending' AND attempts > 0` : sql`(status = 'failed' OR (status = 'pending' AND attempts > 0))`
  const [rows, [{ n }]] = await Promise.all([
    sql<FailingDelivery[]>`
      SELECT id, account_id::int AS account_id, webhook_id::int AS webhook_id, job_id, event, url, status, attempts,
        last_status_code, last_error, next_attempt_at, created_at
      FROM webhook_deliveries WHERE ${where} ORDER BY created_at DESC, id DESC LIMIT ${o.limit} OFFSET ${o.offset}`,
    sql<{ n: number }[]>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE ${where}`,
  ])
  return { rows, total: n }
}

/** One delivery of a job, as its timeline shows it. */
export interface JobDelivery {
  id: string; event: string; webhook_id: number | null; status: string; attempts: number
  created_at: Date; delivered_at: Date | null; last_status_code: number | null
}

/** A job's deliveries (its timeline on the job page), oldest first. */
export async function jobDeliveries (sql: Q, jobId: string): Promise<JobDelivery[]> {
  return sql`
    SELECT id, event, webhook_id::int AS webhook_id, status, attempts, created_at, delivered_at, last_status_code
    FROM webhook_deliveries WHERE job_id = ${jobId} ORDER BY created_at, id`
}

// ---- The delivery pool (src/webhooks/delivery-worker.ts) -----------------------------------

/** A claimed outbox row. `hook_active`: null for a per-job webhook, else whether it may still be sent. */
export interface ClaimedDelivery {
  id: string
  event_id: string
  account_id: number
  webhook_id: number | null
  job_id: string | null
  event: string
  url: string
  secret: string
  body: string
  attempts: number
  hook_active: boolean | null
}

/**
 * Claims up to `limit` due rows for `leaseSeconds` (docs/architecture.md "Several nodes": any node's pool may claim;
 * SKIP LOCKED keeps nodes off each other's rows; a dead node's lease simply expires).
 */
export async function claimDueDeliveries (sql: Q, limit: number, leaseSeconds: number): Promise<ClaimedDelivery[]> {
  return sql<ClaimedDelivery[]>`
    UPDATE webhook_deliveries d SET claimed_until = now() + make_interval(secs => ${leaseSeconds}::float8)
    WHERE d.id IN (
      SELECT id FROM webhook_deliveries
      WHERE status = 'pending' AND next_attempt_at <= now() AND (claimed_until IS NULL OR claimed_until < now())
      ORDER BY next_attempt_at LIMIT ${limit}
      FOR UPDATE SKIP LOCKED)
    RETURNING d.id, d.event_id, d.account_id, d.webhook_id, d.job_id, d.event, d.url, d.secret, d.body, d.attempts,
      (SELECT w.active AND w.deleted_at IS NULL FROM webhooks w WHERE w.id = d.webhook_id) AS hook_active`
}

/** The result of one attempt and the delivery's next state (src/webhooks/delivery.ts `outcomeOf`). */
export interface AttemptRecord {
  deliveryId: string
  webhookId: number | null
  attempt: number
  attemptedAt: Date
  statusCode: number | null
  latencyMs: number | null
  error: string | null
  status: 'delivered' | 'pending' | 'failed' | 'disabled'
  /** When pending: the next attempt is due this many ms from now (database clock). */
  delayMs: number | null
  /** Deactivate the registered webhook with this reason (a 410). */
  disableWebhook: string | null
}

/**
 * Writes one attempt and the delivery's new state, releasing the claim. A row that left
 * `pending` meanwhile (its webhook was deleted, or disabled by another delivery's 410) keeps
 * its state and reason, but still counts the attempt it made: `attempts` and
 * `last_status_code` always agree with the attempt history. A 2xx still marks it
 * delivered. An attempt older than one already recorded (a lease that ran out) changes nothing
 * but the history.
 */
export async function recordAttempt (tx: Q, a: AttemptRecord): Promise<void> {
  await tx`
    INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, status_code, latency_ms, error)
    VALUES (${a.deliveryId}, ${a.attempt}, ${a.attemptedAt}, ${a.statusCode}, ${a.latencyMs}, ${a.error})`
  const delivered = a.status === 'delivered'
  const deliveredAt = delivered ? new Date(a.attemptedAt.getTime() + (a.latencyMs ?? 0)) : null
  // Whether this attempt decides the delivery's state (else only its figures are recorded).
  const decides = delivered ? tx`status <> 'delivered'` : tx`status = 'pending'`
  await tx`
    UPDATE webhook_deliveries SET
      attempts = greatest(attempts, ${a.attempt}),
      last_status_code = ${a.statusCode}, last_latency_ms = ${a.latencyMs},
      status = CASE WHEN ${decides} THEN ${a.status} ELSE status END,
      claimed_until = CASE WHEN ${decides} THEN NULL ELSE claimed_until END,
      last_error = CASE WHEN ${decides} THEN ${a.error} ELSE last_error END,
      next_attempt_at = CASE WHEN ${decides} AND ${a.status}::text = 'pending'
        THEN clock_timestamp() + make_interval(secs => ${(a.delayMs ?? 0) / 1000}::float8) ELSE next_attempt_at END,
      delivered_at = CASE WHEN ${decides} THEN coalesce(delivered_at, ${deliveredAt}::timestamptz) ELSE delivered_at END
    WHERE id = ${a.deliveryId} AND attempts <= ${a.attempt}`
  if (a.disableWebhook !== null && a.webhookId !== null) {
    await tx`UPDATE webhooks SET active = false, disabled_reason = ${a.disableWebhook} WHERE id = ${a.webhookId} AND active`
    await tx`
      UPDATE webhook_deliveries SET status = 'disabled', claimed_until = NULL, last_error = ${'webhook disabled: ' + a.disableWebhook}
      WHERE webhook_id = ${a.webhookId} AND status = 'pending' AND id <> ${a.deliveryId}`
  }
}

/**
 * Records a batch of attempts: one statement for all of them (the attempts INSERT
 * and the deliveries' UPDATE in one data-modifying CTE over a JSON array), with the same
 * effect per row as recordAttempt. Attempts that disable their webhook (a 410, rare) go
 * through recordAttempt after it; with any of those the whole batch is one transaction.
 */
export async function recordAttempts (sql: Sql, list: AttemptRecord[]): Promise<void> {
  const plain = list.filter(a => a.disableWebhook === null || a.webhookId === null)
  const rest = list.filter(a => !(a.disableWebhook === null || a.webhookId === null))
  const write = async (q: Q) => {
    if (plain.length > 0) {
      // PostgreSQL text cannot hold NUL (a receiver's answer could); the per-row path has the same limit.
      const rows = plain.map(a => ({
        delivery_id: a.deliveryId,
        attempt: a.attempt,
        attempted_at: a.attemptedAt.toISOString(),
        status_code: a.statusCode,
        latency_ms: a.latencyMs,
        error: a.error === null ? null : a.error.replace(/\0/g, ''),
        status: a.status,
        delay_s: (a.delayMs ?? 0) / 1000,
        delivered_at: a.status === 'delivered' ? new Date(a.attemptedAt.getTime() + (a.latencyMs ?? 0)).toISOString() : null,
      }))
      await q`
        WITH a AS (
          SELECT * FROM jsonb_to_recordset(${q.json(rows)}::jsonb) AS a(delivery_id text, attempt integer,
            attempted_at timestamptz, status_code integer, latency_ms integer, error text, status text, delay_s float8,
            delivered_at timestamptz)
        ), ins AS (
          INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, status_code, latency_ms, error)
          SELECT delivery_id, attempt, attempted_at, status_code, latency_ms, error FROM a
        )
        UPDATE webhook_deliveries d SET
          status = a.status, attempts = greatest(d.attempts, a.attempt), claimed_until = NULL,
          last_status_code = a.status_code, last_error = a.error, last_latency_ms = a.latency_ms,
          next_attempt_at = CASE WHEN a.status = 'pending'
            THEN clock_timestamp() + make_interval(secs => a.delay_s) ELSE d.next_attempt_at END,
          delivered_at = coalesce(d.delivered_at, a.delivered_at)
        FROM a
        -- The id list lets the planner find the rows through the primary key whatever it guesses
        -- for the JSON set (it would otherwise hash-join against a scan of the whole outbox).
        WHERE d.id = ANY(${plain.map(a => a.deliveryId)}::text[]) AND d.id = a.delivery_id AND CASE WHEN a.status = 'delivered' THEN d.status <> 'delivered' ELSE d.status = 'pending' END`
    }
    for (const a of rest) await recordAttempt(q, a)
  }
  if (rest.length === 0) await write(sql)
  else await sql.begin(tx => write(tx))
}

/** A claimed row whose registered webhook was deleted or disabled: no attempt, just disabled. */
export async function disableDelivery (tx: Q, id: string, reason: string): Promise<void> {
  await tx`UPDATE webhook_deliveries SET status = 'disabled', claimed_until = NULL, last_error = ${reason} WHERE id = ${id} AND status = 'pending'`
}

/** Gives claimed rows back at once (graceful stop), so another pool need not wait for the lease. */
export async function releaseClaims (sql: Q, ids: string[]): Promise<void> {
  if (ids.length === 0) return
  await sql`UPDATE webhook_deliveries SET claimed_until = NULL WHERE id = ANY(${ids}::text[]) AND status = 'pending'`
}
