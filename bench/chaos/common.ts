/**
 * Shared pieces of the chaos suite: a client that never hangs forever, latency
 * percentiles, and the ledger invariants checked in SQL after every scenario.
 */
import type postgres from 'postgres'

export interface ChaosOptions {
  databaseUrl: string
  log: (line: string) => void
}

export interface Answer { status: number; body: any; ms: number; retryAfter: string | null; at: number }

/** One HTTP request with a hard client-side cap (a hang shows as status 0 after `capMs`). */
export async function call (base: string, method: string, path: string, o: {
  key?: string; token?: string; body?: unknown; raw?: string; headers?: Record<string, string>; capMs?: number
} = {}): Promise<Answer> {
  const headers: Record<string, string> = { ...o.headers }
  if (o.key) headers['x-api-key'] = o.key
  if (o.token) headers.authorization = `Bearer ${o.token}`
  let body: string | undefined
  if (o.raw !== undefined) { body = o.raw; headers['content-type'] ??= 'application/json' } else if (o.body !== undefined) { body = JSON.stringify(o.body); headers['content-type'] = 'application/json' }
  const at = Date.now()
  try {
    const r = await fetch(base + path, { method, headers, body, signal: AbortSignal.timeout(o.capMs ?? 60_000) })
    const text = await r.text()
    let parsed: any = text
    try { parsed = JSON.parse(text) } catch {}
    return { status: r.status, body: parsed, ms: Date.now() - at, retryAfter: r.headers.get('retry-after'), at }
  } catch (err) {
    return { status: 0, body: String(err), ms: Date.now() - at, retryAfter: null, at }
  }
}

export function percentile (xs: number[], p: number): number {
  if (xs.length === 0) return 0
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.ceil(p / 100 * s.length) - 1)]
}

export const sleep = (ms: number) => new Promise<void>(resolve => setTimeout(resolve, ms))

/** Ledger invariants (docs/architecture.md "Durability") in SQL; every figure must be 0 except `accounts` and `jobs`. */
export async function invariants (sql: postgres.Sql, graceS = 5): Promise<Record<string, number>> {
  const [r] = await sql<Record<string, number>[]>`
    SELECT
      (SELECT count(*)::int FROM accounts) AS accounts,
      (SELECT count(*)::int FROM jobs) AS jobs,
      (SELECT count(*)::int FROM accounts a LEFT JOIN (SELECT account_id, sum(delta) AS s FROM credit_entries GROUP BY account_id) e
         ON e.account_id = a.id WHERE a.credits <> coalesce(e.s, 0)) AS balance_ne_ledger,
      (SELECT count(*)::int FROM accounts WHERE credits < 0) AS negative_balance,
      (SELECT count(*)::int FROM (SELECT job_id FROM credit_entries WHERE kind = 'charge' AND job_id IS NOT NULL GROUP BY job_id HAVING count(*) > 1) x) AS charged_twice,
      (SELECT count(*)::int FROM (SELECT job_id FROM credit_entries WHERE kind = 'refund' AND job_id IS NOT NULL GROUP BY job_id HAVING count(*) > 1) x) AS refunded_twice,
      (SELECT count(*)::int FROM jobs j WHERE j.credits_refunded > 0 AND j.status = 'completed') AS completed_and_refunded,
      (SELECT count(*)::int FROM jobs j WHERE j.status IN ('failed', 'cancelled') AND j.credits_charged > 0 AND j.credits_refunded <> j.credits_charged) AS failed_not_refunded,
      (SELECT count(*)::int FROM jobs WHERE status IN ('queued', 'submitted', 'processing') AND deadline_at < now() - make_interval(secs => ${graceS})) AS stuck_past_deadline`
  return r
}

/** The invariant figures that must be zero. */
export function violationsOf (inv: Record<string, number>): number {
  return Object.entries(inv).filter(([k]) => k !== 'accounts' && k !== 'jobs').reduce((n, [, v]) => n + v, 0)
}
