/**
 * `provider-inflight`: N upstream jobs held in flight (--inflight, default 100000): a busy node
 * holding tens of thousands of video jobs at once. Video jobs (seedance-2, routed to fal's
 * seedance 2.0 text-to-video; catalogue estimate 350 s) are created through the API over 100
 * accounts; the fal contract stub (its own process) is in hold mode: every status call answers
 * IN_PROGRESS and no callback leaves until the scenario releases them over the stub's control
 * endpoint. The service runs with a fal request budget (`providers.fal.requests_per_second`,
 * --upstream-rps, default 1000).
 * A job a provider calls back is first polled at its expected end (docs/providers.md "Polling
 * and lost callbacks"): 350 s after its submission, so every job is still within its expected
 * run time during the wait window (submitting 100,000 at 1000 requests/s takes 100 s; the
 * window starts after the settling below) and what the window measures is what holding them
 * costs, not their reconciliation polls. A round that outlasts that (the earliest submission
 * 350 s before the window ends) says so: its figures then include due polls.
 * Settled memory: the creation burst leaves garbage in each thread's V8 heap (promoted to the
 * old generation while creations waited for their budget turn) that no allocation-driven GC
 * collects once the thread goes quiet; V8's memory reducer collects it and gives the pages back
 * on its own timer, up to about 100 s later (measured: a shard's heap 83 -> 24 MB and the
 * process's RSS 436 -> 332 MB 40-60 s into a quiet spell). So RSS is read after SETTLE_QUIET_MS
 * of quiet (less when the jobs' first polls would otherwise fall in the wait window, never less
 * than SETTLE_MIN_MS), before the round as after it. The scenario triggers nothing in the service.
 * Each round:
 * - RSS per in-flight job: the service's RSS once all N are submitted and it has settled, less
 *   its settled RSS before the round, over N; each thread's V8 heap (used) before and after,
 *   from /metrics, says where it went;
 * - while they wait (WAIT_MS): the service's CPU (every thread) as a fraction of one core, and
 *   the upstream requests a second the stub counted (submit, status, result, cancel, JWKS);
 * - then the stub releases every held job (its callback, `concurrency` at a time): time to
 *   drain (release to the last job completed) and completions/s over it.
 * After the rounds: every job completed, charged once and never refunded; the ledger invariant.
 * Targets: <= 2 KB RSS a job, <= 5% of one core while waiting, upstream requests/s while
 * waiting <= the budget. It measures whatever the service does; nothing here shapes it.
 */
import type { Request } from 'autocannon'
import postgres from 'postgres'
import { startFalStubProcess, type FalStubProcess } from './lib/children.js'
import { load, type Metrics } from './lib/load.js'
import { cpuUs, rssBytes } from './lib/proc.js'
import { FAL_VIDEO_MODEL, falRoutesEnv } from './lib/provider-routes.js'
import { sleep, until, type Check, type Scenario } from './lib/scenario.js'
import { ledgerInvariant, seedAccounts } from './lib/seed.js'
import { bootStack, type Stack } from './lib/stack.js'

const ACCOUNTS = 100
/** Quiet before each RSS reading (V8's memory reducer has run by then; see above). */
const SETTLE_QUIET_MS = 120_000
/** Settling never shorter than this, even when the first polls come due. */
const SETTLE_MIN_MS = 5000
/** The wait window ends at least this long before the earliest job's first reconciliation poll. */
const DUE_MARGIN_MS = 15_000
/** The catalogue estimate of FAL_VIDEO_MODEL (src/catalog/models.ts): its first reconciliation poll comes this long after submission. */
const EXPECTED_MS = 350_000
const WAIT_MS = 10_000
/**
 * The drain's limit: a completed video's result is copied into our storage (docs/providers.md),
 * about 140 completions/s on 2 cores (N = 60,000: 441 s).
 */
const DRAIN_MAX_MS = 30 * 60_000
/** Callbacks the stub has in flight at once while draining. */
const RELEASE_CONCURRENCY = 64
const BODY = JSON.stringify({ model: FAL_VIDEO_MODEL, prompt: 'a lighthouse at dawn, waves rolling in (bench provider-inflight)', duration: '6', resolution: '480p' })
/** Upstream routes the stub counts as API calls (not the result media downloads). */
const API_ROUTES = ['submit', 'status', 'result', 'cancel', 'jwks', 'requests']

interface Stats { jobs: number; held: number; counts: Record<string, number>; released: number; callbacks_ok: number; releasing: boolean }

function apiCalls (s: Stats): number {
  return API_ROUTES.reduce((n, r) => n + (s.counts[r] ?? 0), 0)
}

/** Each thread's V8 heap in use (bytes), from the service's /metrics (genjobs_thread_heap_bytes). */
async function threadHeaps (url: string, token: string): Promise<Record<string, number>> {
  const r = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${token}` } })
  const text = await r.text()
  const out: Record<string, number> = {}
  for (const m of text.matchAll(/^genjobs_thread_heap_bytes\{([^}]*)\} (\S+)$/gm)) {
    const thread = /thread="([^"]+)"/.exec(m[1])?.[1]
    if (thread && /kind="used"/.test(m[1])) out[thread] = (out[thread] ?? 0) + Number(m[2])
  }
  return out
}

/** Per thread: heap growth over `jobs` (bytes a job), e.g. "main 812, shard-0 301". */
function heapGrowth (h0: Record<string, number>, h1: Record<string, number>, jobs: number): string {
  return Object.keys(h1).sort().map(t => `${t} ${((h1[t] - (h0[t] ?? 0)) / Math.max(1, jobs)).toFixed(0)}`).join(', ')
}

export const scenario: Scenario = {
  name: 'provider-inflight',
  title: 'upstream jobs held in flight on the fal stub: memory, CPU and upstream calls while they wait, then the drain',
  async prepare (o) {
    const n = o.inflight
    const rps = o.upstreamRps
    let fal: FalStubProcess | null = null
    let stack: Stack | null = null
    let check: postgres.Sql | null = null
    const closeAll = async () => {
      await check?.end({ timeout: 2 })
      await stack?.close()
      await fal?.stop()
    }
    try {
      fal = await startFalStubProcess()
      const stub = fal
      await stub.control('defaults', { steps: [], outcome: 'succeeded', media: 'mp4', finishAfterMs: null, callback: true })
      await stub.control('hold', { on: true })
      stack = await bootStack(o, 'provider-inflight', falRoutesEnv(stub, { requestsPerSecond: rps, video: true }))
      const s = stack
      const seeded = await seedAccounts(s.svc, ACCOUNTS, 1_000_000_000)
      check = postgres(s.db.url, { max: 1, onnotice: () => {} })
      const c = check
      const requests: Request[] = seeded.map(a => ({ method: 'POST', path: '/v1/generate/video', headers: { 'content-type': 'application/json', 'x-api-key': a.key }, body: BODY }))
      const stats = () => stub.control<Stats>('stats')

      const round = async (count: number, log: boolean): Promise<Metrics> => {
        const pid = s.svc.pid
        const st0 = await stats()
        if (log) { o.log(`  settling ${SETTLE_QUIET_MS / 1000} s before the round`); await sleep(SETTLE_QUIET_MS) }
        const heap0 = await threadHeaps(s.svc.url, s.svc.adminToken)
        const rss0 = rssBytes(pid)
        const since = new Date(Date.now() - 1000)
        const t0 = performance.now()
        const r = await load({ url: s.svc.url, connections: o.connections, amount: count, requests })
        const ok = r['2xx']
        if (ok < count) o.log(`  ${count - ok} creations not answered 201 (${JSON.stringify({ statuses: r.statusCodeStats, errors: r.errors, timeouts: r.timeouts })})`)
        // Every created job submitted upstream (a submission the budget deferred gets there later).
        const submitted = await until(async () => (await stats()).held >= ok, 600_000, 250)
        const createMs = performance.now() - t0
        if (!submitted) o.log(`  only ${(await stats()).held} of ${ok} jobs held upstream after 10 min`)
        if (log) o.log(`  ${ok} jobs in flight upstream after ${Math.round(createMs)} ms; settling`)
        // Settled (see above): SETTLE_QUIET_MS, or until the wait window would reach the first polls.
        // (The warm-up round's figures are not kept: it settles SETTLE_MIN_MS only.)
        const beforeDue = t0 + EXPECTED_MS - DUE_MARGIN_MS - WAIT_MS - performance.now()
        const settleFor = !log ? SETTLE_MIN_MS : Math.max(SETTLE_MIN_MS, Math.min(SETTLE_QUIET_MS, beforeDue))
        const rssSeen: number[] = []
        for (const end = performance.now() + settleFor; performance.now() < end;) {
          await sleep(Math.min(10_000, end - performance.now()))
          rssSeen.push(Math.round(rssBytes(pid) / 1048576))
        }
        if (log) o.log(`  RSS while settling ${(settleFor / 1000).toFixed(0)} s (MB, every 10 s): ${rssSeen.join(' ')}`)
        const rss1 = rssBytes(pid)
        const heap1 = await threadHeaps(s.svc.url, s.svc.adminToken)
        const settleMs = performance.now() - t0 - createMs
        const heldNow = (await stats()).held
        const w0 = await stats()
        const c0 = cpuUs(pid)
        const tw0 = performance.now()
        await sleep(WAIT_MS)
        const w1 = await stats()
        const c1 = cpuUs(pid)
        const waitS = (performance.now() - tw0) / 1000
        if (c1 === 0) throw new Error(`service ${pid} exited during the wait`)
        // The first jobs submitted come due for their first reconciliation poll EXPECTED_MS later.
        const pollsDue = performance.now() - t0 > EXPECTED_MS
        if (log) {
          o.log(`  waiting: RSS ${((rss1 - rss0) / Math.max(1, heldNow)).toFixed(0)} B/job (${(rss0 / 1048576).toFixed(0)} -> ${(rss1 / 1048576).toFixed(0)} MB, settled in ${(settleMs / 1000).toFixed(0)} s), ` +
            `V8 heap used B/job by thread: ${heapGrowth(heap0, heap1, heldNow)}; ` +
            `CPU ${((c1 - c0) / 1e6 / waitS).toFixed(3)} of a core, upstream ${((apiCalls(w1) - apiCalls(w0)) / waitS).toFixed(0)} req/s; releasing ${heldNow}`)
          if (pollsDue) o.log(`  the round outlasted the jobs' ${EXPECTED_MS / 1000} s estimate: the earliest were due for reconciliation polls during the wait`)
        }
        // The drain: every held job ends and calls back.
        const d0 = performance.now()
        const dc0 = cpuUs(pid)
        // Hold off first: a job submitted again during the drain (its first submission's answer
        // was lost, or it was a duplicate) ends 50 ms later and calls back, instead of being held.
        await stub.control('hold', { on: false })
        await stub.control('defaults', { finishAfterMs: 50 })
        await stub.control('release', { concurrency: RELEASE_CONCURRENCY })
        // Every job of the round, whatever its creation was answered (a creation answered 503 on
        // a stalled database may still have committed).
        // A job whose submission went unanswered (no upstream id) was never held upstream: it
        // keeps looking for its submission and is counted apart (jobs_lost_submission).
        const terminal = async () => (await c<{ n: number }[]>`
          SELECT count(*)::int AS n FROM jobs WHERE created_at >= ${since} AND status IN ('queued', 'submitted', 'processing') AND provider_job_id IS NOT NULL`)[0].n === 0
        const drained = await until(terminal, DRAIN_MAX_MS, 100)
        const drainMs = performance.now() - d0
        const dc1 = cpuUs(pid)
        if (!drained) o.log(`  not every job terminal ${DRAIN_MAX_MS / 60_000} min after the release`)
        const [done] = await c<{ completed: number; failed: number; lost: number }[]>`
          SELECT count(*) FILTER (WHERE status = 'completed')::int AS completed, count(*) FILTER (WHERE status = 'failed')::int AS failed,
            count(*) FILTER (WHERE status IN ('queued', 'submitted', 'processing') AND provider_job_id IS NULL)::int AS lost
          FROM jobs WHERE created_at >= ${since}`
        const st1 = await stats()
        await stub.control('defaults', { finishAfterMs: null })
        await stub.control('hold', { on: true })
        await stub.control('forget', {})
        return {
          jobs: ok,
          held: heldNow,
          create_ms: createMs,
          rss_before_mb: rss0 / 1048576,
          rss_after_mb: rss1 / 1048576,
          rss_per_job_b: (rss1 - rss0) / Math.max(1, heldNow),
          heap_per_job_b: Object.keys(heap1).reduce((n, t) => n + heap1[t] - (heap0[t] ?? 0), 0) / Math.max(1, heldNow),
          settle_ms: settleMs,
          polls_due_in_wait: pollsDue ? 1 : 0,
          wait_cpu_core_share: (c1 - c0) / 1e6 / waitS,
          upstream_rps_wait: (apiCalls(w1) - apiCalls(w0)) / waitS,
          status_rps_wait: ((w1.counts.status ?? 0) - (w0.counts.status ?? 0)) / waitS,
          upstream_calls_per_job: (apiCalls(st1) - apiCalls(st0)) / Math.max(1, ok),
          drain_ms: drainMs,
          completions_per_s: done.completed / drainMs * 1000,
          drain_cpu_us_per_job: (dc1 - dc0) / Math.max(1, done.completed),
          jobs_completed: done.completed,
          jobs_failed: done.failed,
          jobs_lost_submission: done.lost,
          budget_rps: rps,
        }
      }
      return {
        sides: [{
          name: 'service',
          role: 'service',
          warmup: async () => { await round(Math.min(200, n), false) },
          measure: () => round(n, true),
        }],
        targets: [
          { metric: 'rss_per_job_b', kind: 'absolute', op: '<=', value: 2048 },
          { metric: 'wait_cpu_core_share', kind: 'absolute', op: '<=', value: 0.05 },
          { metric: 'upstream_rps_wait', kind: 'absolute', op: '<=', value: rps },
        ],
        show: ['jobs', 'held', 'create_ms', 'settle_ms', 'rss_before_mb', 'rss_after_mb', 'heap_per_job_b', 'polls_due_in_wait', 'status_rps_wait', 'upstream_calls_per_job', 'drain_ms', 'completions_per_s', 'drain_cpu_us_per_job', 'jobs_failed', 'jobs_lost_submission'],
        notes: [`${n} ${FAL_VIDEO_MODEL} jobs (estimate ${EXPECTED_MS / 1000} s) per round over ${ACCOUNTS} accounts, created with ${o.connections} connections; fal budget ${rps} requests/s; RSS before and after ${SETTLE_QUIET_MS / 1000} s of quiet (less if the jobs' first polls would fall in the wait), CPU and upstream calls over ${WAIT_MS / 1000} s of waiting, drain with ${RELEASE_CONCURRENCY} callbacks in flight from the stub (its own process)`],
        after: async () => {
          const inv = await ledgerInvariant(c)
          // Jobs whose submission went unanswered are still looking for it: not counted here.
          const [r] = await c<Record<string, number>[]>`
            SELECT (SELECT count(*)::int FROM jobs WHERE provider_job_id IS NOT NULL) AS jobs,
              (SELECT count(*)::int FROM jobs WHERE status <> 'completed' AND provider_job_id IS NOT NULL) AS not_completed,
              (SELECT count(*)::int FROM credit_entries e JOIN jobs j ON j.id = e.job_id WHERE e.kind = 'charge' AND j.provider_job_id IS NOT NULL) AS charges,
              (SELECT count(*)::int FROM jobs WHERE provider_job_id IS NULL) AS lost,
              (SELECT count(*)::int FROM credit_entries WHERE kind = 'refund') AS refunds,
              (SELECT count(*)::int FROM (SELECT job_id FROM credit_entries WHERE kind = 'charge' GROUP BY job_id HAVING count(*) > 1) d) AS doubled`
          const checks: Check[] = [
            { metric: 'ledger violations', value: inv.violations, target: '= 0', met: inv.violations === 0 },
            { metric: 'jobs not completed', value: `${r.not_completed} of ${r.jobs}`, target: '= 0', met: r.not_completed === 0 },
            { metric: 'jobs whose submission went unanswered (still looking for it)', value: r.lost, target: 'counted', met: true },
            { metric: 'charges, jobs charged twice, refunds', value: `${r.charges}, ${r.doubled}, ${r.refunds}`, target: `${r.jobs}, 0, 0`, met: r.charges === r.jobs && r.doubled === 0 && r.refunds === 0 },
          ]
          return { checks }
        },
        close: closeAll,
      }
    } catch (err) {
      await closeAll()
      throw err
    }
  },
}
