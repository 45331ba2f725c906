/**
 * `provider-callback`: M image jobs (default 1000, --webhook-jobs) completed through the fal
 * contract stub (test/fixtures/fal-stub.ts, in this process) by signed callback: creation
 * submits to the stub, the stub ends each job 50 ms later and POSTs its Ed25519-signed callback
 * to /v1/providers/fal/callback; the service verifies it, downloads the result into its storage
 * and completes the job. Side "simulated": the same M jobs on the built-in simulated provider
 * (SIM_SPEED set so an image takes ~50 ms, polled), in the same service.
 * Figures: completions/s (M / time from the first creation to the last completion), service
 * CPU (every thread) per job, PostgreSQL CPU per job. Target: fal-by-callback completions/s
 * >= 0.5x the simulated provider's.
 */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Request } from 'autocannon'
import { startFalStub } from '../test/fixtures/fal-stub.js'
import { load, type Metrics } from './lib/load.js'
import { cpuUs, mainThreadCpuUs, pgBackends, pgDelta } from './lib/proc.js'
import { groupCommitTotals, xactCommits } from './lib/service-metrics.js'
import { until, type Check, type Scenario } from './lib/scenario.js'
import { ledgerInvariant, seedAccounts } from './lib/seed.js'
import { bootStack } from './lib/stack.js'

const ACCOUNTS = 10

export const scenario: Scenario = {
  name: 'provider-callback',
  title: 'job completions through the fal stub by signed callback vs the simulated provider',
  async prepare (o) {
    const m = o.webhookJobs
    const fal = await startFalStub()
    fal.defaults = { steps: [], outcome: 'succeeded', media: 'png', finishAfterMs: 50, callback: true }
    const dir = mkdtempSync(join(tmpdir(), 'bench-routes-'))
    const file = join(dir, 'providers.json')
    // nano-banana runs on fal; nano-banana-pro (no entry) on the simulated provider.
    writeFileSync(file, JSON.stringify({ routes: { 'nano-banana': [{ provider: 'fal', model: 'fal-ai/nano-banana', input: { prompt: '$.prompt' } }] } }))
    let stack: Awaited<ReturnType<typeof bootStack>> | null = null
    try {
      stack = await bootStack(o, 'provider-callback', {
        PROVIDERS_FILE: file,
        // A submission whose answer is late is looked up in fal's request list: the stub's.
        ...fal.serviceEnv(),
        // nano-banana-pro's estimate (catalogue) / SIM_SPEED ~ 50 ms.
        SIM_SPEED: '600',
      })
      const s = stack
      const accounts = await seedAccounts(s.svc, ACCOUNTS, 100_000_000)
      let polls = 0
      const completed = async (model: string, since: Date) => ++polls && Number((await s.db.sql<{ n: string }[]>`
        SELECT count(*)::text AS n FROM jobs WHERE model = ${model} AND status = 'completed' AND created_at >= ${since}`)[0].n)
      const lastDone = async (model: string, since: Date) => (await s.db.sql<{ first: Date; last: Date }[]>`
        SELECT min(created_at) AS first, max(completed_at) AS last FROM jobs WHERE model = ${model} AND created_at >= ${since}`)[0]
      const round = async (model: string, count: number): Promise<Metrics> => {
        const body = JSON.stringify({ model, prompt: `bench ${model}` })
        const requests: Request[] = accounts.map(a => ({ method: 'POST', path: '/v1/generate/image', headers: { 'content-type': 'application/json', 'x-api-key': a.key }, body }))
        const since = new Date(Date.now() - 1000)
        const cb0 = fal.callbacks.length
        const c0 = cpuUs(s.svc.pid)
        const main0 = mainThreadCpuUs(s.svc.pid)
        const pg0 = pgBackends(s.db.name)
        const g0 = await groupCommitTotals(s.svc)
        const x0 = await xactCommits(s.db.sql)
        const polls0 = polls
        const r = await load({ url: s.svc.url, connections: 50, amount: count, requests })
        const ok = r['2xx']
        const all = await until(async () => await completed(model, since) >= ok, 120_000, 50)
        const c1 = cpuUs(s.svc.pid)
        const main1 = mainThreadCpuUs(s.svc.pid)
        const pg1 = pgBackends(s.db.name)
        const g1 = await groupCommitTotals(s.svc)
        const x1 = await xactCommits(s.db.sql)
        const span = await lastDone(model, since)
        const ms = new Date(span.last).getTime() - new Date(span.first).getTime()
        if (!all) o.log(`  ${model}: only ${await completed(model, since)} of ${ok} completed within 120 s`)
        return {
          jobs: ok,
          completions_per_s: ok / ms * 1000,
          span_ms: ms,
          cpu_us_per_job: (c1 - c0) / Math.max(1, ok),
          // The front end's event loop (HTTP, callbacks, signature checks unless moved off it).
          main_thread_cpu_us_per_job: (main1 - main0) / Math.max(1, ok),
          pg_cpu_us_per_job: pgDelta(pg0, pg1) / Math.max(1, ok),
          // Group-commit transactions per job (creation, completion and progress batches
          // together) and items per transaction; PostgreSQL transactions of any kind per job
          // (read-only lookups count; this scenario's own polls are taken off; PostgreSQL's
          // statistics lag by up to a second, so approximate).
          group_commits_per_job: (g1.commits - g0.commits) / Math.max(1, ok),
          items_per_group_commit: (g1.items - g0.items) / Math.max(1, g1.commits - g0.commits),
          pg_xacts_per_job: (x1 - x0 - (polls - polls0)) / Math.max(1, ok),
          callbacks: fal.callbacks.length - cb0,
          callbacks_not_200: fal.callbacks.slice(cb0).filter(c => c.status !== 200).length,
        }
      }
      // Each side warms up with a round as large as a measured one (docs/decisions.md "Provider
      // scenarios warm up with a full round"): with 200 jobs the fal rounds still rose round
      // after round as the service's isolates finished optimizing.
      return {
        sides: [
          { name: 'fal by callback', role: 'service', warmup: async () => { await round('nano-banana', m) }, measure: () => round('nano-banana', m) },
          { name: 'simulated', role: 'baseline', warmup: async () => { await round('nano-banana-pro', m) }, measure: () => round('nano-banana-pro', m) },
        ],
        targets: [{ metric: 'completions_per_s', kind: 'ratio', baseline: 'simulated', op: '>=', value: 0.5 }],
        show: ['jobs', 'span_ms', 'cpu_us_per_job', 'main_thread_cpu_us_per_job', 'pg_cpu_us_per_job', 'group_commits_per_job', 'items_per_group_commit', 'pg_xacts_per_job', 'callbacks', 'callbacks_not_200'],
        notes: [`${m} image jobs per round over ${ACCOUNTS} accounts, 50 connections; fal side: the stub (this process) ends each job 50 ms after submission and calls back, the service verifies (Ed25519, JWKS cached), downloads the PNG into storage and completes; simulated side: SIM_SPEED=600 (30 s / 600 = 50 ms), polled. cpu_us_per_job covers every service thread from the first creation to the last completion.`],
        after: async () => {
          const inv = await ledgerInvariant(s.db.sql)
          const stuck = Number((await s.db.sql<{ n: string }[]>`SELECT count(*)::text AS n FROM jobs WHERE status IN ('queued', 'submitted', 'processing')`)[0].n)
          const failed = Number((await s.db.sql<{ n: string }[]>`SELECT count(*)::text AS n FROM jobs WHERE status = 'failed'`)[0].n)
          const byCallback = Number((await s.db.sql<{ n: string }[]>`SELECT count(DISTINCT job_id)::text AS n FROM job_upstream_events WHERE source = 'callback' AND state = 'succeeded'`)[0].n)
          const falJobs = Number((await s.db.sql<{ n: string }[]>`SELECT count(*)::text AS n FROM jobs WHERE model = 'nano-banana'`)[0].n)
          const checks: Check[] = [
            { metric: 'ledger: accounts violating credits = sum(entries)', value: inv.violations, target: '= 0', met: inv.violations === 0 },
            { metric: 'jobs not terminal after the rounds', value: stuck, target: '= 0', met: stuck === 0 },
            { metric: 'failed jobs', value: failed, target: '= 0', met: failed === 0 },
            { metric: 'fal jobs completed by their callback (not a poll)', value: `${byCallback} of ${falJobs}`, target: 'counted', met: true },
          ]
          return { checks }
        },
        close: async () => { await s.close(); await fal.close() },
      }
    } catch (err) {
      await stack?.close()
      await fal.close()
      throw err
    }
  },
}
