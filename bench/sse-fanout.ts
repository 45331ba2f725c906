/**
 * `sse-fanout`: N SSE streams (default 10000) on 10 queued jobs; the 10 jobs are cancelled at
 * once (DELETE /v1/jobs/{id}: refund committed, then `status` + `done` to every stream) and
 * each stream's delivery latency is the time from sending the cancels to its `done` arriving.
 * Baseline: the node:http SSE server publishing the same two events to the same streams on
 * POST /publish/{job}. Target: service p99 <= 100 ms at N = 10000.
 *
 * The service is measured twice in the same run, at FRONTENDS=1 and FRONTENDS=2 (one process
 * each, on its own database), since the fan-out is meant to spread over the front-end
 * threads; the target is checked on the first service side (SSE_FANOUT_FRONTENDS, default 2).
 * `busiest_thread_share` is the busiest thread's share of the process's CPU during the fan-out:
 * at FRONTENDS=2 an even split of the streams over the two threads (SO_REUSEPORT) gives ~0.5.
 */
import { startBaseline, type BaselineProcess } from './lib/children.js'
import type { Metrics } from './lib/load.js'
import { cpuUs, threadsCpuUs } from './lib/proc.js'
import { percentile, sleep, type BenchOptions, type Scenario, type Side } from './lib/scenario.js'
import { api, createJobs, seedAccounts, type SeededAccount } from './lib/seed.js'
import { nativeClient, openSse } from './lib/sse-native.js'
import { bootStack, type Stack } from './lib/stack.js'
import { QUEUE_PROMPT } from './sse-hold.js'

const JOBS = 10

async function fanoutRound (
  o: BenchOptions, pid: number, port: number, n: number, jobs: Array<{ id: string; key: string }>, path: (id: string) => string,
  headers: (key: string) => Record<string, string>, trigger: (j: { id: string; key: string }) => Promise<number>
): Promise<Metrics> {
  const r = await openSse({ port, n, path: (i) => path(jobs[i % jobs.length].id), headers: (i) => headers(jobs[i % jobs.length].key) })
  if (r.failed) o.log(`  ${r.failed} streams failed to open: ${JSON.stringify(r.statuses)}`)
  await sleep(1500)
  const c0 = cpuUs(pid)
  const th0 = threadsCpuUs(pid)
  const own0 = await r.cpuUs()
  const t0 = performance.now()
  const statuses = await Promise.all(jobs.map(trigger))
  const triggerMs = performance.now() - t0
  const doneAt = await r.done(15_000)
  if (process.env.SSE_TRACE) o.log(`  trace: t0 ${(performance.timeOrigin + t0).toFixed(2)} trigger ${triggerMs.toFixed(1)} ms`)
  const c1 = cpuUs(pid)
  const th1 = threadsCpuUs(pid)
  const own = await r.cpuUs() - own0
  const lat = doneAt.filter(t => t > 0).map(t => t - t0)
  await r.close()
  const bad = statuses.filter(s => s !== 200).length
  if (bad) o.log(`  ${bad} triggers did not answer 200: ${statuses.join(',')}`)
  await sleep(1000)
  return {
    streams: r.count,
    delivered: lat.length,
    delivery_first_ms: Math.min(...lat),
    delivery_p50_ms: percentile(lat, 50),
    delivery_p99_ms: percentile(lat, 99),
    delivery_max_ms: Math.max(...lat),
    trigger_ms: triggerMs,
    cpu_us_per_stream_event: (c1 - c0) / Math.max(1, lat.length),
    client_cpu_us_per_stream_event: own / Math.max(1, lat.length),
    busiest_thread_share: busiestShare(th0, th1),
  }
}

/** The busiest thread's share of the CPU a process's threads used between two readings. */
function busiestShare (before: Map<number, number>, after: Map<number, number>): number {
  let total = 0
  let top = 0
  for (const [tid, us] of after) {
    const d = us - (before.get(tid) ?? 0)
    total += d
    if (d > top) top = d
  }
  return total > 0 ? top / total : 0
}

async function queuedJobs (stack: Stack, accounts: SeededAccount[]): Promise<Array<{ id: string; key: string }>> {
  return createJobs(stack.svc, accounts, 1, QUEUE_PROMPT)
}

/** The service side the target is checked on first (SSE_FANOUT_FRONTENDS, 1 or 2; default 2). */
function frontendOrder (): number[] {
  return process.env.SSE_FANOUT_FRONTENDS === '1' ? [1, 2] : [2, 1]
}

export const scenario: Scenario = {
  name: 'sse-fanout',
  title: 'one status change to each of N streams',
  async prepare (o) {
    const n = o.streams
    const stacks: Array<{ frontends: number; stack: Stack }> = []
    let base: BaselineProcess | null = null
    const closeAll = async () => {
      await base?.stop()
      for (const x of stacks) await x.stack.close()
    }
    try {
      const sides: Side[] = []
      for (const frontends of frontendOrder()) {
        const stack = await bootStack(o, `sse-fanout-${frontends}`, { FRONTENDS: String(frontends) })
        stacks.push({ frontends, stack })
        const accounts = await seedAccounts(stack.svc, JOBS, 1_000_000)
        const round = async (count: number) => {
          const jobs = await queuedJobs(stack, accounts)
          return fanoutRound(o, stack.svc.pid, stack.svc.port, count, jobs, (id) => `/v1/sse/jobs/${id}`, (key) => ({ 'x-api-key': key, accept: 'text/event-stream' }),
            async (j) => (await api(stack.svc.url, 'DELETE', `/v1/jobs/${j.id}`, { key: j.key })).status)
        }
        sides.push({ name: `service FRONTENDS=${frontends}`, role: 'service', warmup: async () => { await round(Math.min(1000, n)) }, measure: () => round(n) })
      }
      base = await startBaseline('node:http SSE', 'baselines/node-sse.js')
      const b = base
      let seq = 0
      const baseRound = async (count: number) => {
        const jobs = Array.from({ length: JOBS }, () => ({ id: `job_base${++seq}`, key: '' }))
        return fanoutRound(o, b.pid, b.port, count, jobs, (id) => `/sse/${id}`, () => ({ accept: 'text/event-stream' }),
          async (j) => (await fetch(`http://127.0.0.1:${b.port}/publish/${j.id}`, { method: 'POST' }).then(async r => { await r.arrayBuffer(); return r.status })))
      }
      sides.push({ name: b.name, role: 'baseline', warmup: async () => { await baseRound(Math.min(1000, n)) }, measure: () => baseRound(n) })
      return {
        sides,
        targets: [{ metric: 'delivery_p99_ms', kind: 'absolute', op: '<=', value: 100 }],
        show: ['delivered', 'delivery_first_ms', 'delivery_p50_ms', 'delivery_p99_ms', 'delivery_max_ms', 'trigger_ms', 'cpu_us_per_stream_event', 'client_cpu_us_per_stream_event', 'busiest_thread_share'],
        notes: [
          `${n} streams on ${JOBS} jobs; latency from sending the ${JOBS} cancels (service: DELETE, which commits the refund first) to each stream's done, as seen by one client process`,
          nativeClient() !== null
            ? 'load generator: the C client (bench/lib/sse-client.c, one process; its CPU alone is the load generator CPU)'
            : 'load generator: the Node client (bench/lib/sse-client.ts, in the runner; no C compiler, or SSE_CLIENT=node)',
          `the service measured at FRONTENDS=${frontendOrder().join(' and ')} (one process each, same run); the target row is FRONTENDS=${frontendOrder()[0]}`,
        ],
        close: closeAll,
      }
    } catch (err) {
      await closeAll()
      throw err
    }
  },
}
