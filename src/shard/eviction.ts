import type { Held } from './decide.js'

/**
 * Idle account actors leave their shard (a shard used to keep one actor per account
 * ever used). An actor is dropped only when nothing of it is under way: no message being
 * handled or queued (`busy` counts every shard message from arrival to answer, so a creation
 * between its decision and its commit, a replay or a batch keeps it), no live job, no credits
 * or trial video held, no slot pending, and no use for `idleMs`. The next message builds a new
 * actor, which loads balance, flags and per-key counts from PostgreSQL exactly as a cold
 * account does; idempotency keys are found again in the jobs table (decide falls back to it).
 */
export interface ActorUse {
  /** Shard messages of this actor not answered yet. */
  busy: number
  /** When a message last arrived or was answered (ms). */
  usedAt: number
  readonly mailbox: { readonly size: number }
  readonly jobs: { readonly size: number }
  readonly held: Held
  readonly slots: { readonly idle: boolean }
}

/** Nothing of the actor is under way: dropping it loses only what the database has. */
export function quiescent (a: ActorUse): boolean {
  return a.busy === 0 && a.mailbox.size === 0 && a.jobs.size === 0 && a.held.credits === 0 && a.held.trialVideos === 0 && a.slots.idle
}

export class ActorTable<A extends ActorUse> {
  readonly actors = new Map<number, A>()
  /** Actors dropped so far (metrics, tests). */
  evicted = 0
  private timer: NodeJS.Timeout | null = null

  constructor (private readonly make: (id: number) => A, readonly idleMs: number, private readonly clock: () => number = Date.now) {}

  get size (): number { return this.actors.size }
  values (): IterableIterator<A> { return this.actors.values() }

  /** The actor of `id`, built cold if it is not here. */
  get (id: number): A {
    let a = this.actors.get(id)
    if (a === undefined) { a = this.make(id); this.actors.set(id, a) }
    a.usedAt = this.clock()
    return a
  }

  /** Runs one shard message against the actor; it is not evicted until the answer. */
  async use<T> (id: number, fn: (a: A) => Promise<T>): Promise<T> {
    const a = this.get(id)
    a.busy++
    try { return await fn(a) } finally { a.busy--; a.usedAt = this.clock() }
  }

  /** Drops every quiescent actor unused for `idleMs`; returns how many. */
  sweep (now = this.clock()): number {
    let n = 0
    for (const [id, a] of this.actors) {
      if (now - a.usedAt >= this.idleMs && quiescent(a)) { this.actors.delete(id); n++ }
    }
    this.evicted += n
    return n
  }

  /** Sweeps every idleMs / 2 (at least every second, at most every minute). */
  start (): void {
    this.timer ??= setInterval(() => this.sweep(), Math.min(60_000, Math.max(1000, this.idleMs / 2)))
    this.timer.unref()
  }

  stop (): void { if (this.timer) clearInterval(this.timer); this.timer = null }
}
