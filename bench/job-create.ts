/**
 * `job-create`: POST /v1/generate/image (nano-banana, 10 credits) spread over 100 paid
 * accounts, each answer a durable charge (the 201 leaves only after COMMIT). Baseline: a
 * Fastify route doing one transaction per request with postgres.js on its own tables in the
 * same database, at the same concurrency. Target: req/s >= 3x baseline; afterwards the ledger
 * invariant (accounts.credits = sum(credit_entries.delta)) must hold and every 201 must be a
 * committed job.
 *
 * `job-create-keyed`: the same with a new Idempotency-Key on every request, on both sides (the
 * baseline looks the key up in its transaction and stores it under a unique index), as a client
 * that retries safely sends them.
 *
 * SIM_SPEED=0.001: the simulated provider accepts each job at once and keeps it in its queue
 * for the whole run, so what is measured is creation (validation, charge, group commit,
 * provider submission), not the later life of the jobs (polling, progress, results).
 */
import { startBaseline } from './lib/children.js'
import type { Request } from 'autocannon'
import { measure, type Metrics } from './lib/load.js'
import type { Check, Scenario } from './lib/scenario.js'
import { sleep } from './lib/scenario.js'
import { ledgerInvariant, seedAccounts } from './lib/seed.js'
import { bootStack } from './lib/stack.js'

const BODY = JSON.stringify({ model: 'nano-banana', prompt: 'a lighthouse at dawn, oil painting (bench)' })

/** A new Idempotency-Key on each request (`keyed`), unique across rounds and runs. */
function keyedRequests (requests: Request[]): Request[] {
  const prefix = `${process.pid}-${Date.now().toString(36)}-`
  let n = 0
  return requests.map(r => ({ ...r, setupRequest: (req: Request) => ({ ...req, headers: { ...req.headers, 'idempotency-key': prefix + String(n++) } }) }))
}

export function createScenario (name: string, accounts: number, ratio: number, keyed = false): Scenario {
  return {
    name,
    title: `POST /v1/generate/image over ${accounts} account${accounts > 1 ? 's' : ''}`,
    async prepare (o) {
      const stack = await bootStack(o, name, { SIM_SPEED: '0.001' })
      let base: Awaited<ReturnType<typeof startBaseline>> | null = null
      try {
        o.log(`[${name}] seeding ${accounts} account(s)`)
        const seeded = await seedAccounts(stack.svc, accounts, 100_000_000)
        base = await startBaseline('Fastify 1 tx/request', 'baselines/fastify-charge.js', { DATABASE_URL: stack.db.url, ACCOUNTS: String(accounts), CREDITS: '100000000' })
        const plainSvc: Request[] = seeded.map(a => ({ method: 'POST', path: '/v1/generate/image', headers: { 'content-type': 'application/json', 'x-api-key': a.key }, body: BODY }))
        const plainBase: Request[] = seeded.map((_, i) => ({ method: 'POST', path: '/v1/generate/image', headers: { 'content-type': 'application/json', 'x-account-id': String(i + 1) }, body: BODY }))
        const svcRequests = keyed ? keyedRequests(plainSvc) : plainSvc
        const baseRequests = keyed ? keyedRequests(plainBase) : plainBase
        let created = 0
        let runs = 0
        const commits = async () => Number((await stack.db.sql<{ n: string }[]>`SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = current_database()`)[0].n)
        const run = async (pid: number, url: string, requests: Request[], seconds: number): Promise<Metrics> => {
          const x0 = await commits()
          const { m, raw } = await measure(pid, { url, connections: o.connections, duration: seconds, requests }, stack.db.name)
          await sleep(1100) // statistics reach pg_stat_database within a second
          m.pg_commits_per_req = (await commits() - x0) / m.requests
          if (pid === stack.svc.pid) { created += raw['2xx']; runs++ }
          return m
        }
        const svcUrl = stack.svc.url
        const baseUrl = `http://127.0.0.1:${base.port}`
        const b = base
        return {
          sides: [
            { name: 'service', role: 'service', warmup: async () => { await run(stack.svc.pid, svcUrl, svcRequests, 2) }, measure: () => run(stack.svc.pid, svcUrl, svcRequests, o.duration) },
            { name: b.name, role: 'baseline', warmup: async () => { await run(b.pid, baseUrl, baseRequests, 2) }, measure: () => run(b.pid, baseUrl, baseRequests, o.duration) },
          ],
          targets: [{ metric: 'rps', kind: 'ratio', baseline: b.name, op: '>=', value: ratio }],
          show: ['p50_ms', 'p99_ms', 'cpu_us_per_req', 'pg_cpu_us_per_req', 'total_cpu_us_per_req', 'pg_commits_per_req', 'errors', 'non2xx'],
          notes: [`${o.connections} connections, ${accounts} account(s)${keyed ? ', a new Idempotency-Key on every request (both sides)' : ''}; baseline pool 10 connections; pg_commits_per_req from pg_stat_database (includes the service's metering flush, approximate)`],
          after: async () => {
            const bi = await b.ask<{ violations: number; jobs: number; charges: number }>({ cmd: 'invariant' })
            await stack.stopService() // drains: every acknowledged creation is committed by now
            const inv = await ledgerInvariant(stack.db.sql)
            const [j] = await stack.db.sql<{ jobs: number; charges: number }[]>`
              SELECT (SELECT count(*)::int FROM jobs) AS jobs, (SELECT count(*)::int FROM credit_entries WHERE kind = 'charge') AS charges`
            const checks: Check[] = [
              { metric: 'ledger invariant violations (service)', value: inv.violations, target: '= 0', met: inv.violations === 0 },
              // autocannon stops at the deadline without reading the answers in flight (at most one
              // per connection per run): those jobs were created and charged, just not counted.
              { metric: 'jobs committed / 201s counted (service)', value: `${j.jobs} / ${created}`, target: `201s <= jobs <= 201s + ${runs * o.connections}`, met: j.jobs === j.charges && j.jobs >= created && j.jobs <= created + runs * o.connections },
              { metric: 'ledger invariant violations (baseline)', value: bi.violations, target: '= 0', met: bi.violations === 0 },
            ]
            return { checks, raw: { ledger: inv, jobs: j, created, baseline: bi } }
          },
          close: async () => { await b.stop(); await stack.close() },
        }
      } catch (err) {
        await base?.stop()
        await stack.close()
        throw err
      }
    },
  }
}

export const scenario = createScenario('job-create', 100, 3)
export const keyedScenario = createScenario('job-create-keyed', 100, 3, true)
