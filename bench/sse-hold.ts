/**
 * `sse-hold`: N SSE streams (default 10000) held on 100 live jobs (`[sim:queue]` keeps them
 * queued), opened from 8 loopback source addresses. Baseline: a plain node:http SSE server
 * holding the same N streams. Each round starts a fresh process for each side (so the memory
 * freed by the previous round cannot be reused and hide the cost), warms it with 500 streams,
 * then reads RSS before opening the N streams and again 10 s after they are all open (the
 * figure at 2 s, which still holds the garbage of opening them, is reported beside it).
 * Targets: service RSS growth per stream <= 4 KB and <= 0.3x the baseline's.
 */
import { startBaseline, type BaselineProcess } from './lib/children.js'
import type { Metrics } from './lib/load.js'
import { cpuUs, rssBytes } from './lib/proc.js'
import { sleep, type BenchOptions, type Scenario } from './lib/scenario.js'
import { createJobs, seedAccounts } from './lib/seed.js'
import { closeStreams, openStreams } from './lib/sse-client.js'
import { bootStack } from './lib/stack.js'

/** How long after the last stream opened RSS is read (same for every side). */
const SETTLE_MS = 10_000

export const QUEUE_PROMPT = 'a queued portrait [sim:queue] (bench)'

/** Opens n streams against `pid`, reads RSS/CPU around it, closes them. */
export async function holdRound (
  o: BenchOptions, pid: number, port: number, path: (i: number) => string, headers: (i: number) => Record<string, string>, n: number
): Promise<Metrics> {
  const warm = await openStreams({ port, path, headers, n: Math.min(500, n) })
  closeStreams(warm.streams)
  await sleep(1500)
  const rss0 = rssBytes(pid)
  const cpu0 = cpuUs(pid)
  const r = await openStreams({ port, path, headers, n })
  const opened = r.streams.filter(s => s.openedAt > 0).length
  const cpu1 = cpuUs(pid)
  await sleep(2000)
  const rss2s = rssBytes(pid)
  // Opening N streams also leaves garbage and a grown young generation behind; V8 gives that
  // back once allocation stops (its memory reducer runs after several idle seconds). What a
  // held stream costs is what is still resident then; the 2 s figure is kept for reference.
  await sleep(SETTLE_MS - 2000)
  const rss1 = rssBytes(pid)
  closeStreams(r.streams)
  if (r.failed > 0) o.log(`  ${r.failed} streams failed to open: ${JSON.stringify(r.statuses)}`)
  return {
    streams: opened,
    failed: r.failed,
    open_ms: r.ms,
    rss_before_mb: rss0 / 2 ** 20,
    rss_after_mb: rss1 / 2 ** 20,
    rss_per_stream_b: (rss1 - rss0) / Math.max(1, opened),
    rss_per_stream_2s_b: (rss2s - rss0) / Math.max(1, opened),
    cpu_us_per_stream: (cpu1 - cpu0) / Math.max(1, opened),
  }
}

export const scenario: Scenario = {
  name: 'sse-hold',
  title: 'N SSE streams held on live jobs',
  async prepare (o) {
    const n = o.streams
    const stack = await bootStack(o, 'sse-hold', {})
    let base: BaselineProcess | null = null
    try {
      o.log('[sse-hold] seeding 20 accounts and 100 queued jobs')
      const accounts = await seedAccounts(stack.svc, 20, 1_000_000)
      const jobs = await createJobs(stack.svc, accounts, 5, QUEUE_PROMPT)
      const svcPath = (i: number) => `/v1/sse/jobs/${jobs[i % jobs.length].id}`
      const svcHeaders = (i: number) => ({ 'x-api-key': jobs[i % jobs.length].key, accept: 'text/event-stream' })
      const basePath = (i: number) => `/sse/${jobs[i % jobs.length].id}`
      const noHeaders = () => ({ accept: 'text/event-stream' })
      base = await startBaseline('node:http SSE', 'baselines/node-sse.js')
      return {
        sides: [
          {
            name: 'service',
            role: 'service',
            measure: async (round) => {
              if (round > 0) await stack.restart()
              await sleep(1000)
              return holdRound(o, stack.svc.pid, stack.svc.port, svcPath, svcHeaders, n)
            },
          },
          {
            name: 'node:http SSE',
            role: 'baseline',
            measure: async (round) => {
              if (round > 0) { await base!.stop(); base = await startBaseline('node:http SSE', 'baselines/node-sse.js') }
              await sleep(1000)
              return holdRound(o, base!.pid, base!.port, basePath, noHeaders, n)
            },
          },
        ],
        targets: [
          { metric: 'rss_per_stream_b', kind: 'absolute', op: '<=', value: 4096 },
          { metric: 'rss_per_stream_b', kind: 'ratio', baseline: 'node:http SSE', op: '<=', value: 0.3 },
        ],
        show: ['streams', 'failed', 'rss_per_stream_2s_b', 'rss_before_mb', 'rss_after_mb', 'cpu_us_per_stream', 'open_ms'],
        notes: [`${n} streams on 100 jobs (20 accounts), 8 source addresses; each round in fresh processes; RSS read 10 s after the last stream opened; the service authenticates each stream (X-API-Key) and checks job ownership`],
        close: async () => { await base?.stop(); await stack.close() },
      }
    } catch (err) {
      await base?.stop()
      await stack.close()
      throw err
    }
  },
}
