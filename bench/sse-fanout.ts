/**
 * `sse-fanout`: N SSE streams (default 10000) on 10 queued jobs; the 10 jobs are cancelled at
 * once (DELETE /v1/jobs/{id}: refund committed, then `status` + `done` to every stream) and
 * each stream's delivery latency is the time from sending the cancels to its `done` arriving.
 * Baseline: the node:http SSE server publishing the same two events to the same streams on
 * POST /publish/{job}. Target: service p99 <= 100 ms at N = 10000.
 */
import { startBaseline, type BaselineProcess } from './lib/children.js'
import type { Metrics } from './lib/load.js'
import { cpuUs } from './lib/proc.js'
import { percentile, sleep, until, type BenchOptions, type Scenario } from './lib/scenario.js'
import { api, createJobs, seedAccounts, type SeededAccount } from './lib/seed.js'
import { closeStreams, openStreams } from './lib/sse-client.js'
import { bootStack, type Stack } from './lib/stack.js'
import { QUEUE_PROMPT } from './sse-hold.js'

const JOBS = 10

async function fanoutRound (
  o: BenchOptions, pid: number, port: number, n: number, jobs: Array<{ id: string; key: string }>, path: (id: string) => string,
  headers: (key: string) => Record<string, string>, trigger: (j: { id: string; key: string }) => Promise<number>
): Promise<Metrics> {
  const r = await openStreams({ port, n, path: (i) => path(jobs[i % jobs.length].id), headers: (i) => headers(jobs[i % jobs.length].key) })
  const streams = r.streams.filter(s => s.openedAt > 0)
  if (r.failed) o.log(`  ${r.failed} streams failed to open: ${JSON.stringify(r.statuses)}`)
  await sleep(1500)
  const c0 = cpuUs(pid)
  const own0 = process.cpuUsage()
  const t0 = performance.now()
  const statuses = await Promise.all(jobs.map(trigger))
  const triggerMs = performance.now() - t0
  await until(() => streams.every(s => s.doneAt > 0), 15_000, 5)
  if (process.env.SSE_TRACE) o.log(`  trace: t0 ${(performance.timeOrigin + t0).toFixed(2)} trigger ${triggerMs.toFixed(1)} ms`)
  const c1 = cpuUs(pid)
  const own = process.cpuUsage(own0)
  const lat = streams.filter(s => s.doneAt > 0).map(s => s.doneAt - t0)
  closeStreams(r.streams)
  const bad = statuses.filter(s => s !== 200).length
  if (bad) o.log(`  ${bad} triggers did not answer 200: ${statuses.join(',')}`)
  await sleep(1000)
  return {
    streams: streams.length,
    delivered: lat.length,
    delivery_first_ms: Math.min(...lat),
    delivery_p50_ms: percentile(lat, 50),
    delivery_p99_ms: percentile(lat, 99),
    delivery_max_ms: Math.max(...lat),
    trigger_ms: triggerMs,
    cpu_us_per_stream_event: (c1 - c0) / Math.max(1, lat.length),
    client_cpu_us_per_stream_event: (own.user + own.system) / Math.max(1, lat.length),
  }
}

async function queuedJobs (stack: Stack, accounts: SeededAccount[]): Promise<Array<{ id: string; key: string }>> {
  return createJobs(stack.svc, accounts, 1, QUEUE_PROMPT)
}

export const scenario: Scenario = {
  name: 'sse-fanout',
  title: 'one status change to each of N streams',
  async prepare (o) {
    const n = o.streams
    const stack = await bootStack(o, 'sse-fanout', {})
    let base: BaselineProcess | null = null
    try {
      const accounts = await seedAccounts(stack.svc, JOBS, 1_000_000)
      base = await startBaseline('node:http SSE', 'baselines/node-sse.js')
      const b = base
      const svcRound = async (count: number) => {
        const jobs = await queuedJobs(stack, accounts)
        return fanoutRound(o, stack.svc.pid, stack.svc.port, count, jobs, (id) => `/v1/sse/jobs/${id}`, (key) => ({ 'x-api-key': key, accept: 'text/event-stream' }),
          async (j) => (await api(stack.svc.url, 'DELETE', `/v1/jobs/${j.id}`, { key: j.key })).status)
      }
      let seq = 0
      const baseRound = async (count: number) => {
        const jobs = Array.from({ length: JOBS }, () => ({ id: `job_base${++seq}`, key: '' }))
        return fanoutRound(o, b.pid, b.port, count, jobs, (id) => `/sse/${id}`, () => ({ accept: 'text/event-stream' }),
          async (j) => (await fetch(`http://127.0.0.1:${b.port}/publish/${j.id}`, { method: 'POST' }).then(async r => { await r.arrayBuffer(); return r.status })))
      }
      return {
        sides: [
          { name: 'service', role: 'service', warmup: async () => { await svcRound(Math.min(1000, n)) }, measure: () => svcRound(n) },
          { name: b.name, role: 'baseline', warmup: async () => { await baseRound(Math.min(1000, n)) }, measure: () => baseRound(n) },
        ],
        targets: [{ metric: 'delivery_p99_ms', kind: 'absolute', op: '<=', value: 100 }],
        show: ['delivered', 'delivery_first_ms', 'delivery_p50_ms', 'delivery_p99_ms', 'delivery_max_ms', 'trigger_ms', 'cpu_us_per_stream_event', 'client_cpu_us_per_stream_event'],
        notes: [`${n} streams on ${JOBS} jobs; latency from sending the ${JOBS} cancels (service: DELETE, which commits the refund first) to each stream's done, as seen by one client process`],
        close: async () => { await b.stop(); await stack.close() },
      }
    } catch (err) {
      await base?.stop()
      await stack.close()
      throw err
    }
  },
}
