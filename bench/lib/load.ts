/**
 * One autocannon run against one process, with that process's CPU (and, when given, the CPU
 * of the PostgreSQL backends of its database) read from /proc before and after.
 */
import autocannon, { type Options, type Request, type Result } from 'autocannon'
import { paced, type PacedOptions } from './paced.js'
import { cpuUs, mainThreadCpuUs, pgBackends, pgDelta, threadsCpuUs } from './proc.js'

export type Metrics = Record<string, number>

export interface LoadOptions {
  url: string
  connections: number
  /** Seconds; ignored when `amount` is set. */
  duration?: number
  amount?: number
  /** Requests per second in total (autocannon's overallRate); absent or 0: as fast as it goes. */
  rate?: number
  method?: string
  headers?: Record<string, string>
  body?: string
  /** Requests to cycle through; spread over the connections (see below). */
  requests?: Request[]
}

/** Sum of every answered request, whatever its status. */
export function answered (r: Result): number {
  return r['1xx'] + r['2xx'] + r['3xx'] + r['4xx'] + r['5xx']
}

export async function load (o: LoadOptions): Promise<Result> {
  let clientNo = 0
  const list = o.requests
  const opts: Options = {
    url: o.url,
    connections: o.connections,
    timeout: 30,
  }
  // Each connection cycles its own slice of the list (all of it covered across connections).
  // Only that slice is encoded per connection: autocannon encodes every request of a list once
  // per connection, which for 1000 requests x 100 connections stalls the load generator.
  let slices: Request[][] | null = null
  if (list && list.length > 1) {
    const size = Math.max(1, Math.ceil(list.length / o.connections))
    slices = Array.from({ length: o.connections }, (_, k) => Array.from({ length: size }, (_, j) => list[(k * size + j) % list.length]))
    const all = slices
    opts.setupClient = (client) => { client.setRequests(all[clientNo++ % all.length]) }
  }
  // autocannon reads a present-but-undefined option as a value: set only what is given.
  if (o.rate !== undefined && o.rate > 0) opts.overallRate = o.rate
  if (o.amount !== undefined) opts.amount = o.amount
  else opts.duration = o.duration
  if (o.method !== undefined) opts.method = o.method
  if (o.headers !== undefined) opts.headers = o.headers
  if (o.body !== undefined) opts.body = o.body
  if (list !== undefined) opts.requests = slices ? slices[0] : list
  return autocannon(opts)
}

/** What one run of a load generator reports, whatever the generator. */
interface Run { answered: number; seconds: number; p50_ms: number; p99_ms: number; errors: number; timeouts: number; non2xx: number }

/**
 * Runs `o` against `pid` and returns req/s, latency percentiles (ms), failures and CPU per
 * answered request (µs); with `database`, PostgreSQL backend CPU per request too.
 */
export async function measure (pid: number, o: LoadOptions, database?: string): Promise<{ m: Metrics; raw: Result }> {
  let raw: Result | null = null
  const m = await accounted(pid, database, async () => {
    const r = raw = await load(o)
    const { errors, timeouts, non2xx } = r
    return { answered: answered(r), seconds: r.duration, p50_ms: r.latency.p50, p99_ms: r.latency.p99, errors, timeouts, non2xx }
  })
  return { m, raw: raw! }
}

/**
 * The read scenarios' run (job-get, models): autocannon, or with `paced` > 0 the evenly paced
 * generator at that many requests per second in total (`--paced`).
 */
export async function measureRead (pid: number, o: LoadOptions, paced: number): Promise<Metrics> {
  if (paced <= 0) return (await measure(pid, o)).m
  if (o.duration === undefined) throw new Error('a paced run needs a duration')
  return measurePaced(pid, { url: o.url, connections: o.connections, rate: paced, duration: o.duration, headers: o.headers, requests: o.requests })
}

/**
 * As measure, with the evenly paced C generator (`--paced`, bench/lib/paced.ts) instead of
 * autocannon: `late` (requests that left over 1 ms after their due time) and the generator's
 * own CPU per request besides.
 */
export async function measurePaced (pid: number, o: PacedOptions): Promise<Metrics> {
  let late = 0
  let clientUs = 0
  const m = await accounted(pid, undefined, async () => {
    const r = await paced(o)
    late = r.late
    clientUs = r.cpu_us
    return { answered: r.answered, seconds: r.seconds, p50_ms: r.p50_us / 1000, p99_ms: r.p99_us / 1000, errors: r.errors, timeouts: 0, non2xx: r.non2xx }
  })
  m.late = late
  m.client_cpu_us_per_req = m.requests > 0 ? clientUs / m.requests : NaN
  return m
}

/** `run`'s figures with the CPU `pid` (and `database`'s backends) used meanwhile, per answered request. */
async function accounted (pid: number, database: string | undefined, run: () => Promise<Run>): Promise<Metrics> {
  const pg0 = database ? pgBackends(database) : null
  const c0 = cpuUs(pid)
  const t0 = mainThreadCpuUs(pid)
  const th0 = threadsCpuUs(pid)
  const r = await run()
  const c1 = cpuUs(pid)
  const t1 = mainThreadCpuUs(pid)
  const th1 = threadsCpuUs(pid)
  if (c1 === 0) throw new Error(`process ${pid} exited during the run`)
  const pg1 = database ? pgBackends(database) : null
  const n = r.answered
  const m: Metrics = {
    requests: n,
    rps: n / r.seconds,
    p50_ms: r.p50_ms,
    p99_ms: r.p99_ms,
    errors: r.errors,
    timeouts: r.timeouts,
    non2xx: r.non2xx,
    cpu_ms: (c1 - c0) / 1000,
    cpu_us_per_req: n > 0 ? (c1 - c0) / n : NaN,
    // Diagnostic split: the event-loop thread vs every other thread (workers, GC, libuv).
    main_thread_cpu_us_per_req: n > 0 ? (t1 - t0) / n : NaN,
  }
  // The busiest other threads (worker threads such as the shards, GC helpers), for the JSON.
  const others = [...th1].filter(([tid]) => tid !== pid).map(([tid, us]) => us - (th0.get(tid) ?? 0)).sort((a, b) => b - a)
  others.slice(0, 3).forEach((us, i) => { m[`thread${i + 2}_cpu_us_per_req`] = n > 0 ? us / n : NaN })
  if (pg0 && pg1) {
    const pg = pgDelta(pg0, pg1)
    m.pg_cpu_ms = pg / 1000
    m.pg_cpu_us_per_req = n > 0 ? pg / n : NaN
    m.total_cpu_us_per_req = n > 0 ? (c1 - c0 + pg) / n : NaN
  }
  return m
}
