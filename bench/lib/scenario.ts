/**
 * The shape every bench/<scenario>.ts exports, and what the runner (bench/run.ts) does with
 * it: prepare (fresh database, service, baselines, seed), warm up every side, then measure the
 * sides in alternation (A B A B ...) for N rounds and report medians against the targets.
 */
import type { Metrics } from './load.js'

export interface BenchOptions {
  rounds: number
  /** Seconds per autocannon run. */
  duration: number
  connections: number
  /**
   * Requests per second in total for each side of the read scenarios (job-get, models); 0: as
   * fast as the load generator goes. autocannon's overallRate is a per-second quota each
   * connection spends at full speed: a burst every second, not an even load (see `paced`).
   */
  rate: number
  /**
   * Requests per second in total for each side of job-get and models, evenly spaced (the C
   * generator, bench/lib/paced.ts); 0: off. Unlike `rate` (autocannon's per-second quota, spent
   * in a burst), every server sees the same arrival times.
   */
  paced: number
  /** SSE streams for sse-hold and sse-fanout. */
  streams: number
  /** Completions for the webhooks scenario (and jobs per round of the provider scenarios). */
  webhookJobs: number
  /** Upstream jobs held in flight by provider-inflight. */
  inflight: number
  /** Callbacks a second the fal stub sends in provider-sse. */
  callbackRate: number
  /** The fal request budget (requests_per_second) of provider-inflight. */
  upstreamRps: number
  /** PostgreSQL server; each scenario creates (and drops) its own database on it. */
  databaseUrl: string
  /** Extra node flags for the service (BENCH_NODE_FLAGS, e.g. --cpu-prof). */
  nodeFlags: string[]
  log: (msg: string) => void
}

/** One thing measured each round: the service, or one baseline, in its own process. */
export interface Side {
  name: string
  role: 'service' | 'baseline'
  /** Runs once before the rounds (JIT, caches, connection pools). */
  warmup?: () => Promise<void>
  measure: (round: number) => Promise<Metrics>
}

/**
 * A target (docs/benchmarks.md "Scenarios"). `ratio`: service median / `baseline` median of `metric`;
 * `absolute`: the service median itself.
 */
export interface Target {
  metric: string
  kind: 'ratio' | 'absolute'
  baseline?: string
  op: '<=' | '>='
  value: number
}

/** A pass/fail fact checked once after the rounds (ledger invariant, lost deliveries). */
export interface Check { metric: string; value: number | string; target: string; met: boolean }

export interface Prepared {
  sides: Side[]
  targets: Target[]
  /** Further metrics shown per side (no target). */
  show: string[]
  after?: () => Promise<{ checks: Check[]; raw?: Record<string, unknown> }>
  close: () => Promise<void>
  notes?: string[]
}

export interface Scenario {
  name: string
  title: string
  prepare: (o: BenchOptions) => Promise<Prepared | { skip: string }>
}

/** How the read scenarios' load was held (job-get, models), for their notes. */
export function rateNote (o: BenchOptions): string {
  if (o.paced > 0) return `, ${o.paced} req/s evenly spaced for every side (--paced: bench/lib/http-paced.c, latency from each request's due time)`
  return o.rate > 0 ? `, ${o.rate} req/s for every side (--rate: autocannon's per-second quota)` : ''
}

export function median (xs: number[]): number {
  const v = xs.filter(x => Number.isFinite(x)).sort((a, b) => a - b)
  if (v.length === 0) return NaN
  const m = v.length >> 1
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2
}

export function percentile (xs: number[], p: number): number {
  if (xs.length === 0) return NaN
  const v = [...xs].sort((a, b) => a - b)
  return v[Math.min(v.length - 1, Math.max(0, Math.ceil((p / 100) * v.length) - 1))]
}

export const sleep = (ms: number) => new Promise<void>(resolve => setTimeout(resolve, ms))

/** Polls `fn` until it returns true, up to `timeoutMs`. */
export async function until (fn: () => Promise<boolean> | boolean, timeoutMs: number, everyMs = 100): Promise<boolean> {
  const end = Date.now() + timeoutMs
  for (;;) {
    if (await fn()) return true
    if (Date.now() > end) return false
    await sleep(everyMs)
  }
}
