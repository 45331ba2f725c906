import type { JobView } from './view.js'
import { TERMINAL } from './view.js'

export interface CachedJob { accountId: number; view: JobView }

/**
 * The front end's read cache of job views (DESIGN.md section 2, "read cache"): fed by the
 * shards' `job.updated` events, so GET /v1/jobs/{id} of a recent or live job costs no
 * database round trip and no thread hop. Bounded (least recently written out first).
 * Views loaded from PostgreSQL never replace a newer one delivered by an event.
 */
export class JobCache {
  private readonly map = new Map<string, CachedJob>()
  private readonly listeners = new Set<(accountId: number, view: JobView) => void>()

  constructor (private readonly capacity = 200_000) {}

  get size (): number { return this.map.size }

  get (id: string): CachedJob | undefined { return this.map.get(id) }

  /** An authoritative change from the owning shard. */
  update (accountId: number, view: JobView): void {
    this.map.delete(id(view))
    this.map.set(view.id, { accountId, view })
    this.evict()
    for (const l of this.listeners) l(accountId, view)
  }

  /** A view read from the database: kept only if nothing newer is cached. */
  fill (accountId: number, view: JobView): CachedJob {
    const have = this.map.get(view.id)
    if (have && (TERMINAL.has(have.view.status) || have.view.updated_at >= view.updated_at)) return have
    const e = { accountId, view }
    this.map.set(view.id, e)
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
      if (!TERMINAL.has(e.view.status) && pred(e.accountId)) { this.map.delete(id); n++ }
    }
    return n
  }

  onUpdate (fn: (accountId: number, view: JobView) => void): () => void {
    this.listeners.add(fn)
    return () => this.listeners.delete(fn)
  }

  private evict (): void {
    if (this.map.size <= this.capacity) return
    const drop = this.map.size - this.capacity
    let i = 0
    for (const k of this.map.keys()) { if (i++ >= drop) break; this.map.delete(k) }
  }
}

function id (v: JobView): string { return v.id }
