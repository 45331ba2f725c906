import { activeJobsByStatus } from './db/jobs.js'
import { outboxLag } from './db/outbox.js'
import { collectDefaultMetrics, Counter, Gauge, Registry, type Metric } from 'prom-client'
import type { Sql } from './db/connect.js'
import { Hist, threadSnapshot, type HistSnap, type StatsSnapshot } from './worker-stats.js'
import type { FrontendStats } from './http/front-ends/protocol.js'
import { escaped } from './escaped.js'
import type { RouteState } from './providers/registry.js'

/** One exposition row as prom-client's Registry reads it. */
interface Row { value: number; labels: Record<string, string | number>; metricName?: string }

/**
 * A Prometheus metric whose values are computed at scrape time from worker snapshots
 * (src/worker-stats.ts). prom-client's Registry only needs `name`, `help`, `type` and `get()`.
 */
class Collected {
  readonly aggregator = 'sum'
  constructor (readonly name: string, readonly help: string, readonly type: 'histogram' | 'gauge' | 'counter', private readonly read: () => Row[]) {}
  get (): { name: string; help: string; type: string; aggregator: string; values: Row[] } {
    return { name: this.name, help: this.help, type: this.type, aggregator: 'sum', values: this.read() }
  }

  reset (): void {}
}

function addHist (into: Map<string, HistSnap>, key: string, h: HistSnap): void {
  const cur = into.get(key)
  if (!cur) { into.set(key, { buckets: h.buckets, counts: [...h.counts], sum: h.sum, count: h.count }); return }
  for (let i = 0; i < h.counts.length; i++) cur.counts[i] += h.counts[i]
  cur.sum += h.sum
  cur.count += h.count
}

/** Prometheus exposition rows of a histogram (cumulative buckets). */
function histValues (name: string, h: HistSnap, labels: Record<string, string>): Row[] {
  const out: Row[] = []
  let acc = 0
  for (let i = 0; i < h.buckets.length; i++) {
    acc += h.counts[i]
    out.push({ metricName: `${name}_bucket`, labels: { ...labels, le: h.buckets[i] }, value: acc })
  }
  acc += h.counts[h.buckets.length]
  out.push({ metricName: `${name}_bucket`, labels: { ...labels, le: '+Inf' }, value: acc })
  out.push({ metricName: `${name}_sum`, labels, value: h.sum })
  out.push({ metricName: `${name}_count`, labels, value: h.count })
  return out
}

/** Where scrape-time values come from (set by src/app.ts once the pools exist). */
export interface MetricSources {
  /** One snapshot per worker thread (shards and the delivery worker); a worker that does not answer is left out. */
  workerStats: () => Promise<StatsSnapshot[]>
  sql: Sql
  sseOpen: () => number
  /** The other front-end threads' request metrics (src/http/front-ends/pool.ts); absent with FRONTENDS=1. */
  frontends?: () => Promise<FrontendStats[]>
  /** The routes of PROVIDERS_FILE on this node (src/shard/shard-pool.ts `nodeRouteStates`): the operator's route view. */
  routes?: () => Promise<RouteState[]>
}

const HTTP_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10]
const NON_TERMINAL = ['queued', 'submitted', 'processing']

/** Requests answered with one (route, method, status), and that route's latency histogram (seconds). */
export interface RequestCell { n: number; readonly hist: Hist }

/**
 * The main thread's Prometheus registry (docs/operations.md "Metrics"). The request hook is
 * one call per answered request; its cells are plain counters in nested maps keyed by route
 * path, method and status, so the hot path does no label-object lookups or string building.
 */
export class Metrics {
  readonly registry = new Registry()
  /** Jobs created and 429 refusals: plain cells, summed with the other front-end threads' at scrape time. */
  private readonly createdCells = new Map<string, Map<string, { n: number }>>()
  private readonly refusalCells = new Map<string, { n: number }>()
  private readonly finished: Counter<'status'>
  /** Request counts by route pattern, method and status: plain cells, no label hashing per request. */
  private readonly reqCells = new Map<string, Map<string, Map<number, RequestCell>>>()
  /** Request latency (seconds) by route pattern. */
  private readonly durations = new Map<string, Hist>()
  private sources: MetricSources | null = null
  /** The last scrape's worker snapshots, read by the collected metrics below. */
  private snaps: StatsSnapshot[] = []
  private jobsByState: Record<string, number> = {}
  private outboxLagSeconds = 0
  private outboxPending = 0
  /** The other front-end threads' last snapshots. */
  private fronts: FrontendStats[] = []
  /** The last scrape's route view. */
  private routeStates: RouteState[] = []
  /** Set on a front-end thread other than the main one: /metrics is the main thread's (every thread summed). */
  delegate: (() => Promise<string>) | null = null

  /**
   * `processMetrics`: prom-client's default process and Node.js series with the `genjobs_`
   * prefix (resident memory, CPU seconds, open files, heap, GC, event-loop lag;
   * docs/operations.md "Metrics"). Only the main thread's instance collects them: the process figures are the
   * whole process's, the event-loop lag is the main thread's (the one that takes the scrape),
   * and other front-end threads delegate their scrapes to it.
   */
  constructor (opts: { processMetrics?: boolean } = {}) {
    const registers = [this.registry]
    if (opts.processMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'genjobs_' })
    this.finished = new Counter({ name: 'genjobs_jobs_finished_total', help: 'Jobs that reached a terminal state on this node, by status', labelNames: ['status'], registers })
    // Read at scrape time through arrows (collect's own `this` is the gauge).
    const sseOpen = () => (this.sources?.sseOpen() ?? 0) + this.fronts.reduce((n, f) => n + f.sseOpen, 0)
    const jobsIn = (state: string) => this.jobsByState[state] ?? 0
    const outboxLag = () => this.outboxLagSeconds
    const outboxPending = () => this.outboxPending
    new Gauge({ name: 'genjobs_sse_streams_open', help: 'SSE streams open on this node', registers, collect () { this.set(sseOpen()) } })
    new Gauge({ name: 'genjobs_jobs', help: 'Jobs in a non-terminal state (all nodes, from PostgreSQL), by state', labelNames: ['state'], registers, collect () { for (const s of NON_TERMINAL) this.set({ state: s }, jobsIn(s)) } })
    new Gauge({ name: 'genjobs_outbox_lag_seconds', help: 'Age of the oldest webhook delivery that is due and not yet delivered (0 when none)', registers, collect () { this.set(outboxLag()) } })
    new Gauge({ name: 'genjobs_outbox_pending', help: 'Webhook deliveries waiting (pending) in the outbox', registers, collect () { this.set(outboxPending()) } })
    const sumHist = (name: string, pick: (s: StatsSnapshot) => HistSnap) => () => {
      const m = new Map<string, HistSnap>()
      for (const s of this.snaps) addHist(m, '', pick(s))
      const h = m.get('')
      return h ? histValues(name, h, {}) : []
    }
    // prom-client's registerMetric takes its own Metric class; a Collected has the fields the
    // registry reads (get, name, help, type, aggregator) and nothing it does not.
    const reg = (c: Collected) => this.registry.registerMetric(c as unknown as Metric)
    // prom-client's labelled children hash their label object on every inc/observe; the two
    // per-request series are kept in plain cells instead and exposed at scrape time.
    reg(new Collected('genjobs_jobs_created_total', 'Jobs created (not replays), by type and model', 'counter', () => {
      const m = new Map<string, { labels: { type: string; model: string }; value: number }>()
      for (const f of [this.stats(), ...this.fronts]) {
        for (const [type, model, n] of f.created) {
          const k = `${type}\0${model}`
          const r = m.get(k)
          if (r) r.value += n
          else m.set(k, { labels: { type, model }, value: n })
        }
      }
      return [...m.values()]
    }))
    reg(new Collected('genjobs_refusals_total', 'Requests refused with 429, by reason (RATE_LIMIT_EXCEEDED, concurrency_limit_reached, TOO_MANY_STREAMS)', 'counter', () => {
      const m = new Map<string, number>()
      for (const f of [this.stats(), ...this.fronts]) for (const [code, n] of f.refusals) m.set(code, (m.get(code) ?? 0) + n)
      return [...m].map(([reason, n]) => ({ labels: { reason }, value: n }))
    }))
    reg(new Collected('genjobs_http_requests_total', 'HTTP requests answered, by route pattern (unmatched: no route), method and status', 'counter', () => {
      const m = new Map<string, Row>()
      for (const f of [this.stats(), ...this.fronts]) {
        for (const [route, method, status, n] of f.requests) {
          const k = `${route}\0${method}\0${status}`
          const r = m.get(k)
          if (r) r.value += n
          else m.set(k, { labels: { route, method, status }, value: n })
        }
      }
      return [...m.values()]
    }))
    reg(new Collected('genjobs_uncaught_errors_total', 'Errors that escaped a request or callback and were contained without stopping the process (logged with their stack)', 'counter', () =>
      [{ labels: {}, value: [this.stats(), ...this.fronts].reduce((n, f) => n + f.escaped, 0) }]))
    reg(new Collected('genjobs_http_request_duration_seconds', 'Time from request to answer, by route pattern', 'histogram', () => {
      const m = new Map<string, HistSnap>()
      for (const f of [this.stats(), ...this.fronts]) for (const [route, h] of f.durations) addHist(m, route, h)
      return [...m].flatMap(([route, h]) => histValues('genjobs_http_request_duration_seconds', h, { route }))
    }))
    reg(new Collected('genjobs_group_commit_batch_size', 'Items per group-commit transaction (all shards and the delivery worker)', 'histogram', sumHist('genjobs_group_commit_batch_size', s => s.commitBatch)))
    reg(new Collected('genjobs_group_commit_seconds', 'Group-commit transaction latency', 'histogram', sumHist('genjobs_group_commit_seconds', s => s.commitSeconds)))
    reg(new Collected('genjobs_shard_mailbox_depth', 'Messages queued in actor mailboxes, all shards', 'gauge', () => [{ labels: {}, value: this.snaps.reduce((n, s) => n + s.mailboxDepth, 0) }]))
    reg(new Collected('genjobs_provider_seconds', 'Provider call latency (submissions), by provider', 'histogram', () => {
      const m = new Map<string, HistSnap>()
      for (const s of this.snaps) for (const [k, h] of Object.entries(s.providerSeconds)) addHist(m, k, h)
      return [...m].flatMap(([k, h]) => histValues('genjobs_provider_seconds', h, { provider: k }))
    }))
    reg(new Collected('genjobs_provider_errors_total', 'Provider calls that failed or timed out, by provider', 'counter', () => {
      const m = new Map<string, number>()
      for (const s of this.snaps) for (const [k, n] of Object.entries(s.providerErrors)) m.set(k, (m.get(k) ?? 0) + n)
      return [...m].map(([k, n]) => ({ labels: { provider: k }, value: n }))
    }))
    reg(new Collected('genjobs_provider_breaker_state', 'Circuit breaker per provider: 0 closed, 1 half-open, 2 open (the worst over shards)', 'gauge', () => {
      const m = new Map<string, number>()
      for (const s of this.snaps) for (const [k, n] of Object.entries(s.breakers)) m.set(k, Math.max(m.get(k) ?? 0, n))
      return [...m].map(([k, n]) => ({ labels: { provider: k }, value: n }))
    }))
    // The route view that is not in the public health (docs/providers.md "Routing", Operators): one series per route of PROVIDERS_FILE.
    const perRoute = (pick: (r: RouteState) => number | null) => () => this.routeStates.flatMap(r => {
      const v = pick(r)
      return v === null ? [] : [{ labels: { model: r.model, route: r.route, provider: r.provider, upstream_model: r.upstream_model }, value: v }]
    })
    reg(new Collected('genjobs_provider_route_in_flight', 'Jobs the provider holds on each route of PROVIDERS_FILE (this node)', 'gauge', perRoute(r => r.in_flight)))
    reg(new Collected('genjobs_provider_route_queued', 'Charged jobs waiting for room on each route (this node)', 'gauge', perRoute(r => r.queued)))
    reg(new Collected('genjobs_provider_route_breaker_open', 'Route circuit breaker: 1 open on some shard (skipped until its cool-down ends), 0 closed', 'gauge', perRoute(r => r.breaker === 'open' ? 1 : 0)))
    reg(new Collected('genjobs_provider_route_max_concurrent', "Each capped route's max_concurrent (routes without a cap are left out)", 'gauge', perRoute(r => r.max_concurrent)))
    reg(new Collected('genjobs_webhook_deliveries_total', 'Webhook delivery attempts by outcome (delivered, retry, failed, disabled)', 'counter', () => {
      const m = new Map<string, number>([['delivered', 0], ['retry', 0], ['failed', 0], ['disabled', 0]])
      for (const s of this.snaps) for (const [k, n] of Object.entries(s.deliveries)) m.set(k, (m.get(k) ?? 0) + n)
      return [...m].map(([k, n]) => ({ labels: { outcome: k }, value: n }))
    }))
    // For the soak (docs/operations.md "Chaos suite"): which thread's heap or which structure grows.
    const threads = () => [threadSnapshot(), ...this.snaps]
    reg(new Collected('genjobs_thread_heap_bytes', 'V8 heap per thread (main, shard-N, delivery worker), by kind: used, total, external, malloced', 'gauge', () =>
      threads().flatMap(t => Object.entries(t.heap).map(([kind, value]) => ({ labels: { thread: t.thread, kind }, value })))))
    reg(new Collected('genjobs_thread_structure_size', 'Entries (or bytes, names ending in _bytes) of long-lived structures per thread', 'gauge', () =>
      threads().flatMap(t => Object.entries(t.sizes).map(([name, value]) => ({ labels: { thread: t.thread, name }, value })))))
    reg(new Collected('genjobs_webhook_delivery_seconds', 'Webhook POST latency', 'histogram', sumHist('genjobs_webhook_delivery_seconds', s => s.deliverySeconds)))
  }

  setSources (s: MetricSources): void { this.sources = s }

  /** The request hook (src/http/server.ts): one call per answered request. */
  request (route: string, method: string, status: number, ms: number): void {
    const c = this.requestCell(route, method, status)
    c.n++
    c.hist.observe(ms / 1000)
  }

  /**
   * The counter of (route, method, status) with its route's latency histogram, for a caller
   * that answers the same triple over and over (the fast paths keep it per compiled route):
   * counting is then `n++` and one observe, with no map lookup per request.
   */
  requestCell (route: string, method: string, status: number): RequestCell {
    let byMethod = this.reqCells.get(route)
    if (byMethod === undefined) { byMethod = new Map(); this.reqCells.set(route, byMethod) }
    let byStatus = byMethod.get(method)
    if (byStatus === undefined) { byStatus = new Map(); byMethod.set(method, byStatus) }
    let c = byStatus.get(status)
    if (c === undefined) {
      let d = this.durations.get(route)
      if (d === undefined) { d = new Hist(HTTP_BUCKETS); this.durations.set(route, d) }
      c = { n: 0, hist: d }
      byStatus.set(status, c)
    }
    return c
  }

  /** A 429 refusal, by its error code. */
  refused (code: string): void {
    let c = this.refusalCells.get(code)
    if (c === undefined) { c = { n: 0 }; this.refusalCells.set(code, c) }
    c.n++
  }

  jobCreated (type: string, model: string): void {
    let byModel = this.createdCells.get(type)
    if (byModel === undefined) { byModel = new Map(); this.createdCells.set(type, byModel) }
    let c = byModel.get(model)
    if (c === undefined) { c = { n: 0 }; byModel.set(model, c) }
    c.n++
  }

  /** This thread's request-side cells as plain data (summed by the main thread's scrape). */
  stats (sseOpen = 0): FrontendStats {
    const requests: FrontendStats['requests'] = []
    for (const [route, byMethod] of this.reqCells) {
      for (const [method, byStatus] of byMethod) for (const [status, c] of byStatus) requests.push([route, method, status, c.n])
    }
    const durations: FrontendStats['durations'] = [...this.durations].map(([route, h]) => [route, { buckets: h.buckets, counts: [...h.counts], sum: h.sum, count: h.count }])
    const created: FrontendStats['created'] = []
    for (const [type, byModel] of this.createdCells) for (const [model, c] of byModel) created.push([type, model, c.n])
    const refusals: FrontendStats['refusals'] = [...this.refusalCells].map(([code, c]) => [code, c.n])
    return { requests, durations, created, refusals, sseOpen, escaped: escaped.count }
  }

  jobFinished (status: string): void { this.finished.labels(status).inc() }

  /** The exposition text; gathers worker snapshots and the PostgreSQL gauges first. */
  async scrape (): Promise<string> {
    if (this.delegate) return await this.delegate()
    const src = this.sources
    if (src) {
      const [snaps, states, outbox, fronts, routes] = await Promise.all([
        src.workerStats(),
        activeJobsByStatus(src.sql).catch(() => null),
        outboxLag(src.sql).catch(() => null),
        src.frontends?.() ?? [],
        src.routes?.().catch(() => []) ?? [],
      ])
      this.fronts = fronts
      this.routeStates = routes
      this.snaps = snaps
      if (states) this.jobsByState = Object.fromEntries(states.map(r => [r.status, r.n]))
      if (outbox !== null) { this.outboxLagSeconds = Math.max(0, outbox?.lag ?? 0); this.outboxPending = outbox?.pending ?? 0 }
    }
    return this.registry.metrics()
  }
}
