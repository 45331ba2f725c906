import type { JobProgress, JobView } from './view.js'
import { TERMINAL } from './view.js'

export interface CachedJob { accountId: number; view: JobView }

/**
 * A cache entry: the view and, once a fast read served it, its serialised body (the fast path
 * reads the bytes from the entry it already holds, with no lookup by identity). An
 * entry is never changed: a new view is a new entry, so its bytes can never be stale.
 */
class Entry implements CachedJob {
  json: Buffer | undefined = undefined
  toon: Buffer | undefined = undefined
  constructor (readonly accountId: number, readonly view: JobView, readonly bytes: number) {}
}

/**
 * Values many views share (status, type, model): one copy each, instead of one per view (a view
 * that crossed from a shard brings its own copies). Bounded: past SHARED_MAX distinct values a
 * view keeps its own.
 */
const SHARED_MAX = 4096
const sharedValues = new Map<string, string>()
function shared<T extends string> (v: T): T {
  const have = sharedValues.get(v)
  if (have !== undefined) return have as T
  if (sharedValues.size < SHARED_MAX) sharedValues.set(v, v)
  return v
}

/**
 * The view as the cache keeps it (docs/architecture.md "Waiting jobs": a front end may hold the
 * views of a hundred thousand jobs in flight): every field in the object itself, in one layout
 * (a view that crossed from a shard keeps its fields in a separate property array), shared copies
 * of the repeated values, and one string when updated_at equals created_at. The same JSON.
 */
function compact (o: JobView): JobView {
  return literal(o, shared(o.status), o.progress, o.updated_at === o.created_at ? o.created_at : o.updated_at)
}

/** `o` as one in-object literal (the field order of a view), with this status, progress and updated_at. */
function literal (o: JobView, status: JobView['status'], progress: number, updatedAt: string): JobView {
  return {
    id: o.id,
    status,
    type: shared(o.type),
    model: shared(o.model),
    prompt: o.prompt,
    progress,
    credits_charged: o.credits_charged,
    credits_refunded: o.credits_refunded,
    estimated_seconds: o.estimated_seconds,
    result_url: o.result_url,
    error_message: o.error_message,
    content_policy_violation: o.content_policy_violation,
    created_at: o.created_at,
    updated_at: updatedAt,
    completed_at: o.completed_at,
  }
}

/** Default memory budget (JOB_CACHE_MB). */
export const JOB_CACHE_MB = 256

/**
 * Heap an entry may cost, estimated from what it holds: the view object and
 * map entry (~1 KB, measured), its strings (V8 keeps Latin-1 strings at
 * one byte a character and anything else at two), and the UTF-8 JSON body the front end keeps
 * for a polled view (src/http/respond.ts serialises an immutable view once). Over-estimates
 * rather than under: the budget is a ceiling.
 */
export function entryBytes (v: JobView): number {
  let n = 1024
  for (const s of [v.prompt, v.result_url, v.error_message]) {
    if (s === null || s === undefined) continue
    n += s.length * (/[^\u0000-\u00ff]/.test(s) ? 2 : 1) + Buffer.byteLength(s, 'utf8')
  }
  return n
}

/**
 * The front end's read cache of job views (docs/architecture.md "Threads", the job read cache): fed by the
 * shards' `job.updated` events, so GET /v1/jobs/{id} of a recent or live job costs no
 * database round trip and no thread hop. Bounded in bytes by a memory budget (JOB_CACHE_MB)
 * and in entries (least recently written out first); an evicted job is read from PostgreSQL.
 * Views loaded from PostgreSQL never replace a newer one delivered by an event.
 */
export class JobCache {
  private readonly map = new Map<string, Entry>()
  private readonly listeners = new Set<(accountId: number, view: JobView) => void>()
  private total = 0
  private readonly budget: number

  /** `budgetBytes`: estimated heap the cache may hold (JOB_CACHE_MB); `capacity`: entries at most. */
  constructor (budgetBytes = JOB_CACHE_MB * 1024 * 1024, private readonly capacity = 200_000) {
    this.budget = budgetBytes
  }

  get size (): number { return this.map.size }

  /** Estimated bytes held (entryBytes summed); never above the budget after a write. */
  get bytes (): number { return this.total }

  get (id: string): CachedJob | undefined { return this.map.get(id) }

  /** The entry itself, its serialised bodies included (the fast read path). */
  entry (id: string): Entry | undefined { return this.map.get(id) }

  /** An authoritative change from the owning shard. */
  update (accountId: number, view: JobView): void {
    this.remove(id(view))
    this.put(view.id, accountId, view)
    this.evict()
    for (const l of this.listeners) l(accountId, view)
  }

  /**
   * A non-terminal change from the owning shard (its compact `job.progress` event): a new
   * view, the cached one with status, progress and updated_at replaced (a new object, so the
   * body serialised for the old one is never served for it), stored and published like
   * update(). Returns it, or null when the job is not cached (its view is then read from
   * PostgreSQL on next use) or already terminal here (nothing after the end is applied).
   */
  progress (accountId: number, p: JobProgress): JobView | null {
    const e = this.map.get(p.id)
    if (e === undefined || e.accountId !== accountId || TERMINAL.has(e.view.status)) return null
    const o = e.view
    const view = literal(o, shared(p.status), p.progress, p.updated_at)
    // Most recently written last (eviction order); its strings, so its bytes, are the same.
    this.map.delete(p.id)
    this.map.set(p.id, new Entry(accountId, view, e.bytes))
    for (const l of this.listeners) l(accountId, view)
    return view
  }

  /** A view read from the database: kept only if nothing newer is cached. */
  fill (accountId: number, view: JobView): CachedJob {
    const have = this.map.get(view.id)
    if (have && (TERMINAL.has(have.view.status) || have.view.updated_at >= view.updated_at)) return have
    if (have) this.remove(view.id)
    const e = this.put(view.id, accountId, view)
    this.evict()
    return e
  }

  /**
   * Forgets non-terminal views of accounts matching `pred` (a crashed shard may have died
   * between a commit and its event); the next read loads them from PostgreSQL.
   */
  dropActive (pred: (accountId: number) => boolean): number {
    let n = 0
    for (const [id, e] of this.map) {
      if (!TERMINAL.has(e.view.status) && pred(e.accountId)) { this.remove(id); n++ }
    }
    return n
  }

  onUpdate (fn: (accountId: number, view: JobView) => void): () => void {
    this.listeners.add(fn)
    return () => this.listeners.delete(fn)
  }

  private put (key: string, accountId: number, view: JobView): CachedJob {
    const e = new Entry(accountId, compact(view), entryBytes(view))
    this.map.set(key, e)
    this.total += e.bytes
    return e
  }

  private remove (key: string): void {
    const e = this.map.get(key)
    if (!e) return
    this.total -= e.bytes
    this.map.delete(key)
  }

  /** Least recently written first, until both the entry cap and the byte budget hold. */
  private evict (): void {
    if (this.map.size <= this.capacity && this.total <= this.budget) return
    for (const [k, e] of this.map) {
      if (this.map.size <= this.capacity && this.total <= this.budget) break
      this.total -= e.bytes
      this.map.delete(k)
    }
  }
}

function id (v: JobView): string { return v.id }
