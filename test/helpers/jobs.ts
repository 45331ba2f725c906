import postgres from 'postgres'
import { createUser, type TestServer, type TestUser } from './server.js'
import { waitFor } from './wait.js'

type Tap = { teardown: (fn: () => Promise<void> | void) => void }

/** Limits high enough that the rate window and concurrency never get in a job test's way. */
export const UNLIMITED_TIERS = JSON.stringify({
  free: { rpm: 1_000_000, max_concurrent: 100_000 },
  pro: { rpm: 1_000_000, max_concurrent: 100_000 },
  enterprise: { rpm: 1_000_000, max_concurrent: 100_000 },
  session: { rpm: 1_000_000, max_concurrent: 100_000 },
})

/**
 * Env for fast simulated jobs: SIM_SPEED 200 makes veo3-fast (110 s) take 0.55 s and every
 * deadline max(4 x estimate, 600 s) / 200 = 3 s or more; [sim:timeout] answers 504 after 300 ms.
 */
export const FAST_ENV = { SIM_SPEED: '200', SUBMIT_TIMEOUT_MS: '300', TIER_LIMITS: UNLIMITED_TIERS }

export const TERMINAL = new Set(['completed', 'failed', 'cancelled'])

/** A user who has made a purchase (tier pro, no free-trial limit): `credits` in total. */
export async function paidUser (s: TestServer, credits = 1000): Promise<TestUser> {
  const u = await createUser(s, { credits: 1 })
  const r = await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: credits - 1 } })
  if (r.status !== 201) throw new Error(`purchase: ${r.status} ${r.text}`)
  return u
}

/** GET /v1/credits balance. */
export async function balance (s: TestServer, u: TestUser): Promise<number> {
  const r = await s.req('GET', '/v1/credits', { key: u.key })
  if (r.status !== 200) throw new Error(`credits: ${r.status} ${r.text}`)
  return r.body.credits
}

/**
 * Polls GET /v1/jobs/{id} until `done(job)` (default: terminal), returning every view seen
 * (the last one is the final). Throws after `timeoutMs`.
 */
export async function pollJob (
  s: TestServer, u: TestUser, id: string, o: { timeoutMs?: number; everyMs?: number; done?: (j: any) => boolean } = {}
): Promise<{ job: any; seen: any[] }> {
  const done = o.done ?? ((j: any) => TERMINAL.has(j.status))
  const seen: any[] = []
  let failed: Error | undefined
  await waitFor(async () => {
    const r = await s.req('GET', `/v1/jobs/${id}`, { key: u.key })
    if (r.status !== 200) { failed = new Error(`GET job ${id}: ${r.status} ${r.text}`); return true }
    seen.push(r.body)
    return done(r.body)
  }, { what: () => `job ${id} (still ${seen.at(-1)?.status})`, timeoutMs: o.timeoutMs ?? 15_000, everyMs: o.everyMs ?? 25 })
  if (failed) throw failed
  return { job: seen.at(-1), seen }
}

/** A direct connection to the test server's database (closed at teardown). */
export function dbOf (t: Tap, s: { databaseUrl: string }) {
  const sql = postgres(s.databaseUrl, {
    max: 2,
    onnotice: () => {},
    types: { bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) } },
  })
  t.teardown(() => sql.end({ timeout: 5 }))
  return sql
}

/** Ledger entries of one account, oldest first. */
export async function ledger (sql: postgres.Sql<any>, accountId: number): Promise<Array<{ delta: number; kind: string; job_id: string | null }>> {
  return sql`SELECT delta, kind, job_id FROM credit_entries WHERE account_id = ${accountId} ORDER BY id` as any
}

/** Fetches a URL the service handed out (under PUBLIC_BASE_URL, which is not this test's address) through the server. */
export function fetchResult (s: TestServer, url: string, init?: RequestInit): Promise<Response> {
  const u = new URL(url)
  return fetch(s.url + u.pathname + u.search, init)
}

export const video = (prompt = 'a cat surfing a wave at sunset', extra: Record<string, unknown> = {}) => ({ model: 'veo3-fast', prompt, aspect_ratio: '16:9', ...extra })
export const image = (prompt = 'a red apple on a table', extra: Record<string, unknown> = {}) => ({ model: 'nano-banana', prompt, ...extra })
