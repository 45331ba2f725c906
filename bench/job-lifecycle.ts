/**
 * `job-lifecycle`: jobs created AND driven to `completed` per second. Each
 * round autocannon creates nano-banana jobs (POST /v1/generate/image, 10 credits) over 100 paid
 * accounts for --duration seconds; the simulated provider (SIM_SPEED) finishes each one after
 * 15 s / SIM_SPEED, polled by its JobActor (a tenth of that, 20 ms to 5 s). Half the accounts
 * have a registered job.completed webhook (to a local receiver, its own process), so their
 * completions also write an outbox row, which the service's delivery pool then delivers.
 *
 * Per round, on each side (service, then the usual-way baseline, alternating):
 * - creations/s: 201s counted by autocannon / run time.
 * - completions/s: jobs whose completed_at falls in [t0 + settle, t1] / that span, where
 *   settle = simulated duration + one poll: a job created at t0 cannot complete earlier even
 *   on an idle machine, so the window sees the steady state, not the ramp. A side that keeps
 *   up completes as many per second as it creates (ratio 1); one that falls behind builds a
 *   backlog and the ratio shows by how much.
 * - lifecycle/s: every job the round completed / (run time + drain time): jobs fully done per
 *   second of wall time with nothing left over, the figure that does not depend on the window.
 * - CPU per job: utime+stime of the side's process (every thread) and of the PostgreSQL
 *   backends of the database (the scenario's own check connection excluded) from t0 until every
 *   job of the round is terminal and (service) every outbox row delivered, divided by the jobs
 *   completed in the round. The next side starts only after that drain.
 * Both sides write one usage row per request (the baseline: bench/baselines/usual-create.ts
 * meterRequests). At SIM_SPEED=1000 (job-lifecycle-fast) a job ends before its first poll, so
 * neither side writes progress: the run with no progress writes.
 * After the rounds (service and baseline stopped): every created job terminal and completed,
 * ledger invariant, no job charged or refunded twice, one library row per completed job, one
 * outbox row per completion of a webhook account (service: all delivered), and the UPDATEs of
 * jobs per job from pg_stat_user_tables (exact once the backends have exited).
 */
import type { Request } from 'autocannon'
import postgres from 'postgres'
import { startBaseline, type BaselineProcess } from './lib/children.js'
import { answered, load, type Metrics } from './lib/load.js'
import { cpuUs, pgBackends, pgDelta } from './lib/proc.js'
import { sleep, until, type Check, type Scenario } from './lib/scenario.js'
import { api, ledgerInvariant, seedAccounts } from './lib/seed.js'
import { bootStack } from './lib/stack.js'

const ACCOUNTS = 100
const WEBHOOK_ACCOUNTS = 50
const ESTIMATED_SECONDS = 15 // nano-banana
const BODY = JSON.stringify({ model: 'nano-banana', prompt: 'a lighthouse at dawn, oil painting (bench lifecycle)' })
const DRAIN_TIMEOUT_MS = 300_000

export function lifecycleScenario (name: string, simSpeed: number): Scenario {
  const durationMs = Math.max(1, Math.round(ESTIMATED_SECONDS * 1000 / simSpeed))
  const pollMs = Math.min(5000, Math.max(20, Math.round(durationMs / 10)))
  const settleMs = durationMs + pollMs
  return {
    name,
    title: `nano-banana jobs created and completed (SIM_SPEED=${simSpeed}) over ${ACCOUNTS} accounts`,
    async prepare (o) {
      if (o.duration * 1000 < 2 * settleMs) throw new Error(`${name} needs --duration >= ${Math.ceil(2 * settleMs / 1000)} s (jobs take ${settleMs} ms to complete)`)
      const receiver = await startBaseline('receiver', 'lib/webhook-receiver.js')
      const hookUrl = `http://127.0.0.1:${receiver.port}/hook`
      let stack: Awaited<ReturnType<typeof bootStack>> | null = null
      let base: BaselineProcess | null = null
      let check: postgres.Sql | null = null
      try {
        stack = await bootStack(o, name, { SIM_SPEED: String(simSpeed), WEBHOOK_ALLOWLIST: `127.0.0.1:${receiver.port}` })
        const s = stack
        o.log(`[${name}] seeding ${ACCOUNTS} accounts, ${WEBHOOK_ACCOUNTS} with a webhook`)
        const seeded = await seedAccounts(s.svc, ACCOUNTS, 100_000_000)
        for (const a of seeded.slice(0, WEBHOOK_ACCOUNTS)) {
          const r = await api(s.svc.url, 'POST', '/v1/webhooks', { key: a.key, body: { url: hookUrl, events: ['job.completed', 'job.failed'] } })
          if (r.status !== 201) throw new Error(`POST /v1/webhooks answered ${r.status}: ${JSON.stringify(r.body).slice(0, 300)}`)
        }
        base = await startBaseline('Fastify usual way', 'baselines/fastify-lifecycle.js', {
          DATABASE_URL: s.db.url, ACCOUNTS: String(ACCOUNTS), CREDITS: '100000000', SIM_SPEED: String(simSpeed),
          WEBHOOK_ACCOUNTS: String(WEBHOOK_ACCOUNTS), WEBHOOK_URL: hookUrl,
        })
        const b = base
        // The scenario's own connection: its drain polls are excluded from PostgreSQL CPU.
        check = postgres(s.db.url, { max: 1, onnotice: () => {} })
        const c = check
        const checkPid = Number((await c<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`)[0].pid)
        const pgCpu = () => { const m = pgBackends(s.db.name); m.delete(checkPid); return m }

        const svcRequests: Request[] = seeded.map(a => ({ method: 'POST', path: '/v1/generate/image', headers: { 'content-type': 'application/json', 'x-api-key': a.key }, body: BODY }))
        const baseRequests: Request[] = seeded.map((_, i) => ({ method: 'POST', path: '/v1/generate/image', headers: { 'content-type': 'application/json', 'x-account-id': String(i + 1) }, body: BODY }))
        let created = 0
        let runs = 0
        let drainFailures = 0

        const svcSide = {
          pid: () => s.svc.pid,
          url: () => s.svc.url,
          requests: svcRequests,
          drained: async () => {
            const [r] = await c<{ active: number; outbox: number }[]>`
              SELECT (SELECT count(*)::int FROM jobs WHERE status IN ('queued', 'submitted', 'processing')) AS active,
                (SELECT count(*)::int FROM webhook_deliveries WHERE status = 'pending') AS outbox`
            return r.active === 0 && r.outbox === 0
          },
          completedBetween: async (from: Date, to: Date) => (await c<{ n: number }[]>`
            SELECT count(*)::int AS n FROM jobs WHERE status = 'completed' AND completed_at >= ${from} AND completed_at < ${to}`)[0].n,
          failedBetween: async (from: Date, to: Date) => (await c<{ n: number }[]>`
            SELECT count(*)::int AS n FROM jobs WHERE status = 'failed' AND completed_at >= ${from} AND completed_at < ${to}`)[0].n,
        }
        const baseSide = {
          pid: () => b.pid,
          url: () => `http://127.0.0.1:${b.port}`,
          requests: baseRequests,
          drained: async () => (await b.ask<{ pending: number }>({ cmd: 'pending' })).pending === 0,
          completedBetween: async (from: Date, to: Date) => (await b.ask<{ n: number }>({ cmd: 'completedBetween', from: from.getTime(), to: to.getTime() })).n,
          failedBetween: async (from: Date, to: Date) => (await b.ask<{ n: number }>({ cmd: 'completedBetween', status: 'failed', from: from.getTime(), to: to.getTime() })).n,
        }

        const round = async (side: typeof svcSide, seconds: number): Promise<Metrics> => {
          const pid = side.pid()
          const pg0 = pgCpu()
          const c0 = cpuUs(pid)
          const t0 = new Date()
          const r = await load({ url: side.url(), connections: o.connections, duration: seconds, requests: side.requests })
          const t1 = new Date()
          const ok = await until(side.drained, DRAIN_TIMEOUT_MS, 50)
          const t2 = new Date()
          const c1 = cpuUs(pid)
          const pg1 = pgCpu()
          if (c1 === 0) throw new Error(`process ${pid} exited during the run`)
          if (!ok) { drainFailures++; o.log(`  not drained ${DRAIN_TIMEOUT_MS / 1000} s after the run`) }
          if (side === svcSide) { created += r['2xx']; runs++ }
          // Every job of the round completed at or after t0 (the previous round drained first).
          const jobs = await side.completedBetween(t0, new Date(t2.getTime() + 1000))
          const failed = await side.failedBetween(t0, new Date(t2.getTime() + 1000))
          const inWindow = await side.completedBetween(new Date(t0.getTime() + settleMs), t1)
          const windowS = (t1.getTime() - t0.getTime() - settleMs) / 1000
          const runS = (t1.getTime() - t0.getTime()) / 1000
          const pg = pgDelta(pg0, pg1)
          const creations = r['2xx'] / runS
          const completions = inWindow / windowS
          return {
            created: r['2xx'],
            creations_per_s: creations,
            completions_per_s: completions,
            completion_ratio: creations > 0 ? completions / creations : NaN,
            lifecycle_per_s: jobs / ((t2.getTime() - t0.getTime()) / 1000),
            completed_in_window: inWindow,
            window_s: windowS,
            jobs_completed: jobs,
            jobs_failed: failed,
            drain_ms: t2.getTime() - t1.getTime(),
            p50_ms: r.latency.p50,
            p99_ms: r.latency.p99,
            errors: r.errors + r.timeouts,
            non2xx: answered(r) - r['2xx'],
            cpu_ms: (c1 - c0) / 1000,
            pg_cpu_ms: pg / 1000,
            cpu_us_per_job: jobs > 0 ? (c1 - c0) / jobs : NaN,
            pg_cpu_us_per_job: jobs > 0 ? pg / jobs : NaN,
            total_cpu_us_per_job: jobs > 0 ? (c1 - c0 + pg) / jobs : NaN,
          }
        }
        const warm = Math.max(2, Math.ceil(2 * settleMs / 1000))
        return {
          sides: [
            { name: 'service', role: 'service', warmup: async () => { await round(svcSide, warm) }, measure: () => round(svcSide, o.duration) },
            { name: b.name, role: 'baseline', warmup: async () => { await round(baseSide, warm) }, measure: () => round(baseSide, o.duration) },
          ],
          targets: [
            { metric: 'completions_per_s', kind: 'ratio', baseline: b.name, op: '>=', value: 3 },
            { metric: 'completion_ratio', kind: 'absolute', op: '>=', value: 0.5 },
          ],
          show: ['creations_per_s', 'completion_ratio', 'lifecycle_per_s', 'jobs_completed', 'jobs_failed', 'cpu_us_per_job', 'pg_cpu_us_per_job', 'total_cpu_us_per_job', 'drain_ms', 'p50_ms', 'p99_ms', 'errors', 'non2xx'],
          notes: [`SIM_SPEED=${simSpeed}: each job takes ${durationMs} ms, polled every ${pollMs} ms; completions/s counted over [t0 + ${settleMs} ms, end of run]; ${o.connections} connections creating, ${ACCOUNTS} accounts, ${WEBHOOK_ACCOUNTS} with a webhook; CPU per job from t0 until the round drained (service figures include delivering its webhooks, the baseline only writes its outbox rows)`],
          after: async () => {
            const bc = await b.ask<Record<string, number>>({ cmd: 'check' })
            await b.stop()
            await s.stopService() // drains; backends exit, so pg_stat_user_tables is complete
            const inv = await ledgerInvariant(s.db.sql)
            const [j] = await c<Record<string, number>[]>`
              SELECT (SELECT count(*)::int FROM jobs) AS jobs,
                (SELECT count(*)::int FROM jobs WHERE status NOT IN ('completed', 'failed', 'cancelled')) AS not_terminal,
                (SELECT count(*)::int FROM jobs WHERE status = 'completed') AS completed,
                (SELECT count(*)::int FROM jobs WHERE status = 'failed') AS failed,
                (SELECT count(*)::int FROM credit_entries WHERE kind = 'charge') AS charges,
                (SELECT count(*)::int FROM credit_entries WHERE kind = 'refund') AS refunds,
                (SELECT count(*)::int FROM (SELECT job_id FROM credit_entries WHERE kind IN ('charge', 'refund') GROUP BY job_id, kind HAVING count(*) > 1) d) AS doubled,
                (SELECT count(*)::int FROM images) AS library,
                (SELECT count(*)::int FROM webhook_deliveries) AS outbox,
                (SELECT count(*)::int FROM webhook_deliveries WHERE status = 'delivered') AS delivered,
                (SELECT count(*)::int FROM request_log) AS usage_rows,
                (SELECT count(*)::int FROM jobs j WHERE status IN ('completed', 'failed') AND EXISTS (SELECT 1 FROM webhooks w WHERE w.account_id = j.account_id)) AS outbox_expected`
            const reasons = await c<{ error: string; n: number }[]>`SELECT coalesce(error_message, '') AS error, count(*)::int AS n FROM jobs WHERE status = 'failed' GROUP BY 1 ORDER BY 2 DESC LIMIT 5`
            await sleep(1500) // the exited backends' table statistics
            const upd = await c<{ relname: string; n: number }[]>`SELECT relname, n_tup_upd::int AS n FROM pg_stat_user_tables WHERE relname IN ('jobs', 'bench_jobs')`
            const updates = Object.fromEntries(upd.map(x => [x.relname, x.n]))
            const perJob = (n: number | undefined, jobs: number) => jobs > 0 && n !== undefined ? Math.round(n / jobs * 100) / 100 : NaN
            const svcUpd = perJob(updates.jobs, j.jobs)
            const baseUpd = perJob(updates.bench_jobs, bc.jobs)
            const checks: Check[] = [
              { metric: 'jobs not terminal after the rounds (service; baseline)', value: `${j.not_terminal}; ${bc.not_terminal}`, target: '= 0', met: j.not_terminal === 0 && bc.not_terminal === 0 },
              { metric: 'jobs completed / created (service; baseline)', value: `${j.completed} / ${j.jobs}; ${bc.completed} / ${bc.jobs}`, target: 'all', met: j.completed === j.jobs && bc.completed === bc.jobs },
              ...reasons.map(x => ({ metric: 'failed (service): ' + x.error.slice(0, 70), value: x.n, target: 'none', met: false })),
              { metric: 'rounds that did not drain', value: drainFailures, target: '= 0', met: drainFailures === 0 },
              { metric: 'ledger invariant violations (service; baseline)', value: `${inv.violations}; ${bc.violations}`, target: '= 0', met: inv.violations === 0 && bc.violations === 0 },
              // autocannon stops without reading the answers in flight: at most one job per connection per run is created but not counted.
              { metric: 'jobs committed / 201s counted (service)', value: `${j.jobs} / ${created}`, target: `201s <= jobs <= 201s + ${runs * o.connections}`, met: j.jobs >= created && j.jobs <= created + runs * o.connections },
              { metric: 'charges = jobs; refunds = failed; double charges or refunds (service; baseline)', value: `${j.charges === j.jobs ? 'yes' : 'NO'}, ${j.refunds === j.failed ? 'yes' : 'NO'}, ${j.doubled}; ${bc.charges === bc.jobs ? 'yes' : 'NO'}, ${bc.refunds === 0 ? 'yes' : 'NO'}, ${bc.doubled}`, target: 'yes, yes, 0', met: j.charges === j.jobs && j.refunds === j.failed && j.doubled === 0 && bc.charges === bc.jobs && bc.refunds === 0 && bc.doubled === 0 },
              { metric: 'library rows / completed (service; baseline)', value: `${j.library} / ${j.completed}; ${bc.library} / ${bc.completed}`, target: 'equal', met: j.library === j.completed && bc.library === bc.completed },
              { metric: 'outbox rows / terminal jobs with a webhook (service; baseline)', value: `${j.outbox} / ${j.outbox_expected}; ${bc.outbox} / ${bc.outbox_expected}`, target: 'equal', met: j.outbox === j.outbox_expected && bc.outbox === bc.outbox_expected },
              { metric: 'outbox rows delivered (service)', value: `${j.delivered} / ${j.outbox}`, target: 'all', met: j.delivered === j.outbox },
              { metric: 'UPDATEs of the job row per job (service; baseline)', value: `${svcUpd}; ${baseUpd}`, target: 'counted', met: true },
              // Both sides meter every request: one usage row each (the service's seeding and webhook registrations add a few).
              { metric: 'usage rows / jobs (service; baseline)', value: `${j.usage_rows} / ${j.jobs}; ${bc.usage_rows} / ${bc.jobs}`, target: '>= 1 each', met: j.usage_rows >= j.jobs && bc.usage_rows >= bc.jobs && bc.meterErrors === 0 },
            ]
            return { checks, raw: {
              failures: reasons.map(x => ({ ...x })), service: j, baseline: bc, ledger: inv, updates, created, settleMs, pollMs, durationMs
            } }
          },
          close: async () => { await c.end({ timeout: 2 }); await b.stop(); await s.close(); await receiver.stop() },
        }
      } catch (err) {
        await check?.end({ timeout: 2 })
        await base?.stop()
        await stack?.close()
        await receiver.stop()
        throw err
      }
    },
  }
}

/** ~10 polls per job (1.5 s each): the realistic case. */
export const scenario = lifecycleScenario('job-lifecycle', 10)
/** 15 ms jobs, done at the first poll (20 ms): no progress writes on either side, creation-bound. */
export const fastScenario = lifecycleScenario('job-lifecycle-fast', 1000)
