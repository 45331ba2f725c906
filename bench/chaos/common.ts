/**
 * Shared pieces of the chaos suite: a client that never hangs forever, latency
 * percentiles, and the ledger invariants checked in SQL after every scenario.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type postgres from 'postgres'
import { startFalStub, type FalStub } from '../../test/fixtures/fal-stub.js'

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

/**
 * Provider jobs in a chaos scenario (docs/operations.md "Chaos"): the fal contract stub in this
 * process, a routing file that runs `FAL_MODEL` on it (every other model stays on the simulated
 * provider), and the service environment that points at it. Each stub job ends `finishAfterMs`
 * after submission and calls back; a callback the service cannot take (killed, database away,
 * or its port changed with a restart) is lost, and the job's reconciliation poll must find it.
 */
export const FAL_MODEL = 'nano-banana-pro'

export async function falForChaos (finishAfterMs = 1500): Promise<{ fal: FalStub; env: Record<string, string>; close (): Promise<void> }> {
  const fal = await startFalStub()
  fal.defaults = { steps: [], outcome: 'succeeded', media: 'png', finishAfterMs, callback: true }
  const dir = mkdtempSync(join(tmpdir(), 'chaos-routes-'))
  const file = join(dir, 'providers.json')
  writeFileSync(file, JSON.stringify({ routes: { [FAL_MODEL]: [{ provider: 'fal', model: 'fal-ai/nano-banana-pro', input: { prompt: '$.prompt' } }] } }))
  return {
    fal,
    env: {
      PROVIDERS_FILE: file, FAL_KEY: fal.key, FAL_QUEUE_URL: fal.url, FAL_JWKS_URL: fal.jwksUrl, FAL_API_URL: fal.url, WEBHOOK_ALLOWLIST: new URL(fal.url).host,
    },
    close: async () => { await fal.close(); rmSync(dir, { recursive: true, force: true }) },
  }
}

/**
 * After recovery every acknowledged provider job must end, completed, exactly once: waits up
 * to `ms` for them to leave the running states, then counts what is wrong (in SQL and at the stub).
 */
export async function providerJobsCheck (sql: postgres.Sql, fal: FalStub, ids: string[], ms: number): Promise<Record<string, number>> {
  const running = async () => (await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE id = ANY(${ids}) AND status IN ('queued', 'submitted', 'processing')`)[0].n
  const until = Date.now() + ms
  let left = await running()
  while (left > 0 && Date.now() < until) { await sleep(500); left = await running() }
  const [r] = await sql<Record<string, number>[]>`
    SELECT
      count(*) FILTER (WHERE status = 'completed')::int AS provider_jobs_completed,
      count(*) FILTER (WHERE status <> 'completed')::int AS provider_jobs_not_completed,
      (SELECT count(*)::int FROM (SELECT job_id FROM credit_entries WHERE job_id = ANY(${ids}) AND kind = 'charge' GROUP BY job_id HAVING count(*) <> 1) x) AS provider_jobs_not_charged_once,
      (SELECT count(*)::int FROM credit_entries WHERE job_id = ANY(${ids}) AND kind = 'refund') AS provider_jobs_refunded,
      (SELECT count(*)::int FROM (SELECT job_id FROM job_upstream_events WHERE job_id = ANY(${ids}) AND source = 'stored' GROUP BY job_id HAVING count(*) > 1) x) AS provider_jobs_stored_twice
    FROM jobs WHERE id = ANY(${ids})`
  if (r.provider_jobs_not_completed > 0) {
    // What happened to each: its status, error and upstream history, for the run's log.
    const bad = await sql<Array<{ id: string; status: string; error_message: string | null }>>`
      SELECT id, status, error_message FROM jobs WHERE id = ANY(${ids}) AND status <> 'completed' LIMIT 5`
    for (const j of bad) {
      const evs = await sql<Array<{ at: Date; source: string; state: string; detail: unknown }>>`
        SELECT at, source, state, detail FROM job_upstream_events WHERE job_id = ${j.id} ORDER BY at`
      console.error(`  provider job ${j.id} ${j.status}: ${j.error_message ?? ''}\n${evs.map(e => `    ${e.at.toISOString()} ${e.source} ${e.state} ${JSON.stringify(e.detail)?.slice(0, 300)}`).join('\n')}`)
    }
  }
  // Upstream jobs per job of ours (the callback URL names it): more than one is a duplicate submission.
  const perJob = new Map<string, number>()
  for (const j of fal.jobs.values()) {
    const id = j.callbackUrl ? new URL(j.callbackUrl).searchParams.get('job') : null
    if (id) perJob.set(id, (perJob.get(id) ?? 0) + 1)
  }
  const dup = ids.filter(id => (perJob.get(id) ?? 0) > 1).length
  const missing = ids.length - r.provider_jobs_completed - r.provider_jobs_not_completed
  const lostCallbacks = fal.callbacks.filter(c => c.status !== 200).length
  return { provider_jobs: ids.length, ...r, provider_jobs_missing: missing, provider_jobs_upstream_twice: dup, provider_callbacks_lost: lostCallbacks }
}

/** The provider-job figures that must be zero. */
export function providerViolations (p: Record<string, number>): number {
  return p.provider_jobs_not_completed + p.provider_jobs_not_charged_once + p.provider_jobs_refunded + p.provider_jobs_stored_twice +
    p.provider_jobs_missing + p.provider_jobs_upstream_twice
}
