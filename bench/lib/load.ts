/**
 * One autocannon run against one process, with that process's CPU (and, when given, the CPU
 * of the PostgreSQL backends of its database) read from /proc before and after.
 */
import autocannon, { type Options, type Request, type Result } from 'autocannon'
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

/**
 * Runs `o` against `pid` and returns req/s, latency percentiles (ms), failures and CPU per
 * answered request (µs); with `database`, PostgreSQL backend CPU per request too.
 */
export async function measure (pid: number, o: LoadOptions, database?: string): Promise<{ m: Metrics; raw: Result }> {
  const pg0 = database ? pgBackends(database) : null
  const c0 = cpuUs(pid)
  const t0 = mainThreadCpuUs(pid)
  const th0 = threadsCpuUs(pid)
  const r = await load(o)
  const c1 = cpuUs(pid)
  const t1 = mainThreadCpuUs(pid)
  const th1 = threadsCpuUs(pid)
  if (c1 === 0) throw new Error(`process ${pid} exited during the run`)
  const pg1 = database ? pgBackends(database) : null
  const n = answered(r)
  const m: Metrics = {
    requests: n,
    rps: n / r.duration,
    p50_ms: r.latency.p50,
    p99_ms: r.latency.p99,
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
  return { m, raw: r }
}
