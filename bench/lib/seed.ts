/**
 * A fresh database per scenario on DATABASE_URL's server, and accounts seeded the way an
 * operator would: POST /v1/admin/accounts, a purchase (paid tier), login, POST /v1/auth/keys.
 */
import { randomBytes } from 'node:crypto'
import postgres from 'postgres'
import type { ServiceProcess } from './children.js'

export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/postgres'

export interface BenchDatabase {
  name: string
  url: string
  /** A small pool on the bench database, for checks (ledger invariant, readiness polls). */
  sql: postgres.Sql
  drop (): Promise<void>
}

export async function createDatabase (serverUrl: string, scenario: string): Promise<BenchDatabase> {
  const name = `genjobs_bench_${scenario.replace(/[^a-z0-9]/g, '_')}_${randomBytes(3).toString('hex')}`
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  try { await admin.unsafe(`CREATE DATABASE ${name}`) } finally { await admin.end() }
  const u = new URL(serverUrl)
  u.pathname = '/' + name
  const url = u.toString()
  const sql = postgres(url, { max: 2, onnotice: () => {}, types: { bigint: postgres.BigInt } })
  return {
    name,
    url,
    sql,
    async drop () {
      await sql.end({ timeout: 5 })
      const a = postgres(serverUrl, { max: 1, onnotice: () => {} })
      try { await a.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) } finally { await a.end() }
    },
  }
}

export async function api (
  base: string, method: string, path: string, o: { token?: string; key?: string; body?: unknown } = {}
): Promise<{ status: number; body: any }> {
  const headers: Record<string, string> = {}
  if (o.token) headers.authorization = `Bearer ${o.token}`
  if (o.key) headers['x-api-key'] = o.key
  if (o.body !== undefined) headers['content-type'] = 'application/json'
  const r = await fetch(base + path, { method, headers, body: o.body === undefined ? undefined : JSON.stringify(o.body) })
  const text = await r.text()
  let body: any = text
  try { body = JSON.parse(text) } catch {}
  return { status: r.status, body }
}

async function must (p: Promise<{ status: number; body: any }>, want: number, what: string): Promise<any> {
  const r = await p
  if (r.status !== want) throw new Error(`${what}: expected ${want}, got ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`)
  return r.body
}

export interface SeededAccount { id: number; key: string; email: string }

/** `n` paid accounts (a purchase upgrades their keys to `pro`) with `credits` each and one API key. */
export async function seedAccounts (svc: ServiceProcess, n: number, credits: number, prefix = 'acct'): Promise<SeededAccount[]> {
  const out: SeededAccount[] = new Array(n)
  let next = 0
  const worker = async () => {
    while (next < n) {
      const i = next++
      const email = `${prefix}${i}-${randomBytes(3).toString('hex')}@bench.example`
      const password = 'bench-password-' + i
      const a = await must(api(svc.url, 'POST', '/v1/admin/accounts', { token: svc.adminToken, body: { email, password, verified: true, credits } }), 201, 'create account')
      await must(api(svc.url, 'POST', `/v1/admin/accounts/${a.user_id}/purchases`, { token: svc.adminToken, body: { credits: 1000 } }), 201, 'purchase')
      const s = await must(api(svc.url, 'POST', '/v1/auth/login', { body: { email, password } }), 200, 'login')
      const k = await must(api(svc.url, 'POST', '/v1/auth/keys', { token: s.token, body: { name: 'bench' } }), 201, 'create key')
      out[i] = { id: a.user_id, key: k.key, email }
    }
  }
  await Promise.all(Array.from({ length: Math.min(8, n) }, worker))
  return out
}

/** The ledger invariant (docs/architecture.md "Durability"): every account's snapshot equals the sum of its ledger entries. */
export async function ledgerInvariant (sql: postgres.Sql): Promise<{ accounts: number; violations: number; credits: string; ledger: string }> {
  const [r] = await sql<{ accounts: number; violations: number; credits: string; ledger: string }[]>`
    SELECT count(*)::int AS accounts,
      count(*) FILTER (WHERE a.credits <> coalesce(e.s, 0))::int AS violations,
      sum(a.credits)::text AS credits, sum(coalesce(e.s, 0))::text AS ledger
    FROM accounts a LEFT JOIN (SELECT account_id, sum(delta) AS s FROM credit_entries GROUP BY account_id) e ON e.account_id = a.id`
  return r
}

/** Creates `perAccount` image jobs (nano-banana, 10 credits) on each account; returns [{id, key}]. */
export async function createJobs (svc: ServiceProcess, accounts: SeededAccount[], perAccount: number, prompt: string): Promise<Array<{
  id: string; key: string; accountId: number
}>> {
  const todo: Array<{ a: SeededAccount; i: number }> = []
  for (let i = 0; i < perAccount; i++) for (const a of accounts) todo.push({ a, i })
  const out: Array<{ id: string; key: string; accountId: number }> = new Array(todo.length)
  let next = 0
  const worker = async () => {
    while (next < todo.length) {
      const k = next++
      const { a } = todo[k]
      const j = await must(api(svc.url, 'POST', '/v1/generate/image', { key: a.key, body: { model: 'nano-banana', prompt } }), 201, 'create job')
      out[k] = { id: j.id, key: a.key, accountId: a.id }
    }
  }
  await Promise.all(Array.from({ length: 32 }, worker))
  return out
}
