/**
 * Measurements taken inside worker threads (shards, the webhook delivery worker), kept as plain
 * numbers (no prom-client there). The main thread asks each worker for `snapshotStats()` when
 * /metrics is scraped (a small message per worker per scrape, nothing on the hot path) and
 * exposes the sums in its registry (src/metrics.ts). Counters are cumulative since the worker
 * started; a restarted worker starts again from zero (Prometheus treats that as a counter reset).
 */
import { getHeapStatistics } from 'node:v8'
import { isMainThread, threadId } from 'node:worker_threads'

/** Group-commit batch sizes (items per transaction). */
export const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
/** Seconds: commit latency, provider latency, delivery latency. */
export const SECONDS_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

/** A histogram as plain arrays; `counts[i]` counts values <= buckets[i] and above buckets[i-1]; the last slot is +Inf. */
export class Hist {
  readonly counts: number[]
  sum = 0
  count = 0
  constructor (readonly buckets: number[]) { this.counts = new Array(buckets.length + 1).fill(0) }
  observe (v: number): void {
    let i = 0
    while (i < this.buckets.length && v > this.buckets[i]) i++
    this.counts[i]++
    this.sum += v
    this.count++
  }
}

export interface HistSnap { buckets: number[]; counts: number[]; sum: number; count: number }

/** What a worker sends back to the main thread. */
export interface StatsSnapshot {
  commitBatch: HistSnap
  commitSeconds: HistSnap
  /** By provider name. */
  providerSeconds: Record<string, HistSnap>
  providerErrors: Record<string, number>
  /** By provider name: 0 closed, 1 half-open (trial allowed), 2 open. */
  breakers: Record<string, number>
  /** Messages queued in actor mailboxes (shards). */
  mailboxDepth: number
  /** Webhook delivery attempts by outcome (delivery worker). */
  deliveries: Record<string, number>
  deliverySeconds: HistSnap
  /** This thread's name (shard-0, delivery) and V8 heap (which thread grows in a soak). */
  thread: string
  heap: ThreadHeap
  /** Sizes of this thread's long-lived structures (actors, live jobs...), by name. */
  sizes: Record<string, number>
}

/** One isolate's heap (v8.getHeapStatistics), in bytes. */
export interface ThreadHeap { used: number; total: number; external: number; malloced: number }

export function threadHeap (): ThreadHeap {
  const h = getHeapStatistics()
  return { used: h.used_heap_size, total: h.total_heap_size, external: h.external_memory ?? 0, malloced: h.malloced_memory }
}

const commitBatch = new Hist(BATCH_BUCKETS)
const commitSeconds = new Hist(SECONDS_BUCKETS)
const providerSeconds = new Map<string, Hist>()
const providerErrors = new Map<string, number>()
const breakers = new Map<string, () => number>()
const deliveries = new Map<string, number>()
const deliverySeconds = new Hist(SECONDS_BUCKETS)
let mailboxDepth: () => number = () => 0
let threadName = isMainThread ? 'main' : `worker-${threadId}`
const sizes = new Map<string, () => number>()

/** Names this thread in its snapshots. */
export function nameThread (name: string): void { threadName = name }

/** A long-lived structure whose size each snapshot reports (`sizes`). */
export function trackSize (name: string, size: () => number): void { sizes.set(name, size) }

/** Group commit: one transaction of `items` took `seconds`. */
export function observeCommit (items: number, seconds: number): void {
  commitBatch.observe(items)
  commitSeconds.observe(seconds)
}

/** Providers: one call to `provider` (submission, poll) took `seconds`; `ok` false counts an error. */
export function observeProvider (provider: string, seconds: number, ok: boolean): void {
  let h = providerSeconds.get(provider)
  if (!h) { h = new Hist(SECONDS_BUCKETS); providerSeconds.set(provider, h) }
  h.observe(seconds)
  if (!ok) providerErrors.set(provider, (providerErrors.get(provider) ?? 0) + 1)
}

/** Providers: `state()` is read at each scrape (0 closed, 1 half-open, 2 open). */
export function trackBreaker (provider: string, state: () => number): void { breakers.set(provider, state) }

/** Shards: how to read the number of queued actor messages. */
export function trackMailboxes (depth: () => number): void { mailboxDepth = depth }

/** Delivery worker: one attempt ended with `outcome` (delivered, retry, failed, disabled) after `seconds`. */
export function observeDelivery (outcome: string, seconds: number): void {
  deliveries.set(outcome, (deliveries.get(outcome) ?? 0) + 1)
  deliverySeconds.observe(seconds)
}

const snap = (h: Hist): HistSnap => ({ buckets: h.buckets, counts: [...h.counts], sum: h.sum, count: h.count })

export function snapshotStats (): StatsSnapshot {
  return {
    commitBatch: snap(commitBatch),
    commitSeconds: snap(commitSeconds),
    providerSeconds: Object.fromEntries([...providerSeconds].map(([k, h]) => [k, snap(h)])),
    providerErrors: Object.fromEntries(providerErrors),
    breakers: Object.fromEntries([...breakers].map(([k, f]) => [k, f()])),
    mailboxDepth: mailboxDepth(),
    deliveries: Object.fromEntries(deliveries),
    deliverySeconds: snap(deliverySeconds),
    ...threadSnapshot(),
  }
}

/** The part of a snapshot every thread has, the main thread included. */
export function threadSnapshot (): Pick<StatsSnapshot, 'thread' | 'heap' | 'sizes'> {
  return { thread: threadName, heap: threadHeap(), sizes: Object.fromEntries([...sizes].map(([k, f]) => [k, f()])) }
}
