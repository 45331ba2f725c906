import type { Q } from './connect.js'

/** Per-day rows of one account's usage in a date range (UTC), merged by src/http/routes/usage.ts. */
export interface UsageRows {
  /** From the usage_daily rollup: never request_log (docs/decisions.md "Assets, usage and docs"). */
  requests: Array<{ day: string; requests: number }>
  /** Ledger sums of kinds charge (negative deltas) and refund (positive), by day. */
  credits: Array<{ day: string; kind: 'charge' | 'refund'; delta: number }>
  /** Jobs created in the range, by day, status and model. */
  jobs: Array<{ day: string; status: string; model: string; n: number }>
}

function usageQueries (sql: Q, accountId: number, from: string, to: string, explain: boolean) {
  const start = `${from}T00:00:00Z`
  const end = new Date(Date.parse(`${to}T00:00:00Z`) + 86_400_000).toISOString()
  const x = explain ? sql`EXPLAIN (FORMAT JSON)` : sql``
  return [
    sql<UsageRows['requests']>`${x}
      SELECT day::text AS day, sum(requests)::bigint AS requests FROM usage_daily
      WHERE account_id = ${accountId} AND day BETWEEN ${from}::date AND ${to}::date
      GROUP BY day`,
    sql<UsageRows['credits']>`${x}
      SELECT (created_at AT TIME ZONE 'UTC')::date::text AS day, kind, sum(delta)::bigint AS delta FROM credit_entries
      WHERE account_id = ${accountId} AND created_at >= ${start}::timestamptz AND created_at < ${end}::timestamptz
        AND kind IN ('charge', 'refund')
      GROUP BY 1, 2`,
    sql<UsageRows['jobs']>`${x}
      SELECT (created_at AT TIME ZONE 'UTC')::date::text AS day, status, model, count(*)::int AS n FROM jobs
      WHERE account_id = ${accountId} AND created_at >= ${start}::timestamptz AND created_at < ${end}::timestamptz
      GROUP BY 1, 2, 3`,
  ] as const
}

/**
 * The three aggregates behind GET /v1/usage/summary, run concurrently. `from` and `to` are
 * inclusive `YYYY-MM-DD` UTC dates. Each is one index range scan of one account:
 * usage_daily's primary key (account_id, day, endpoint), credit_entries_account_created
 * (sql/0006_usage.sql) and jobs_account_created. Cost grows with days x endpoints and with the
 * account's ledger entries and jobs in the range, never with raw request rows.
 */
export async function usageRows (sql: Q, accountId: number, from: string, to: string): Promise<UsageRows> {
  const [requests, credits, jobs] = await Promise.all(usageQueries(sql, accountId, from, to, false))
  return { requests, credits, jobs }
}

/** The query plans of usageRows (EXPLAIN, FORMAT JSON), for tests and operators checking the indexes. */
export async function explainUsageRows (sql: Q, accountId: number, from: string, to: string): Promise<unknown[]> {
  const plans = await Promise.all(usageQueries(sql, accountId, from, to, true))
  return plans.map(p => (p[0] as unknown as Record<string, unknown>)['QUERY PLAN'])
}

/** Counts behind GET /v1/usage/limits. `keyId` null (a session): in-flight jobs of the whole account. */
export async function limitCounts (
  sql: Q, accountId: number, keyId: number | null
): Promise<{ in_flight: number; active_keys: number; active_webhooks: number }> {
  // jobs_running is a partial index on (account_id) over the jobs without completed_at (the non-terminal ones, sql/0018).
  const [r] = await sql<Array<{ in_flight: number; active_keys: number; active_webhooks: number }>>`
      SELECT
        (SELECT count(*)::int FROM jobs WHERE account_id = ${accountId} AND completed_at IS NULL AND status IN ('queued', 'submitted', 'processing')
          ${keyId === null ? sql`` : sql`AND key_id = ${keyId}`}) AS in_flight,
        (SELECT count(*)::int FROM api_keys WHERE account_id = ${accountId} AND revoked_at IS NULL
          AND (expires_at IS NULL OR expires_at > now())) AS active_keys,
        (SELECT count(*)::int FROM webhooks WHERE account_id = ${accountId} AND active AND deleted_at IS NULL) AS active_webhooks`
  return r
}
