/**
 * Reads by key batched per event-loop turn: the reads asked for in one turn go to PostgreSQL
 * as one SELECT (`read`), so a burst costs one round trip per turn, not one per caller, and no
 * account waits for another's read. The shard keeps two: the rows of waiting jobs whose
 * callback came (docs/architecture.md "Waiting jobs"), and the jobs an Idempotency-Key names
 * (docs/architecture.md "Durability", Idempotency). The same key asked twice in a turn is read once.
 */
export class TurnReads<R> {
  private pending: Map<string, Array<Waiter<R>>> | null = null

  /** `read`: the rows of these keys (missing keys have none); `keyOf`: a row's key. */
  constructor (private readonly read: (keys: string[]) => Promise<R[]>, private readonly keyOf: (row: R) => string) {}

  /** The key's row, or undefined when there is none. Rejects when the read failed. */
  get (key: string): Promise<R | undefined> {
    return new Promise((resolve, reject) => {
      if (this.pending === null) {
        this.pending = new Map()
        setImmediate(this.flush)
      }
      const waiters = this.pending.get(key)
      if (waiters) waiters.push({ resolve, reject })
      else this.pending.set(key, [{ resolve, reject }])
    })
  }

  private readonly flush = (): void => {
    const batch = this.pending!
    this.pending = null
    this.read([...batch.keys()]).then((rows) => {
      for (const r of rows) {
        const k = this.keyOf(r)
        const ws = batch.get(k)
        if (ws === undefined) continue
        batch.delete(k)
        for (const w of ws) w.resolve(r)
      }
      for (const ws of batch.values()) for (const w of ws) w.resolve(undefined)
    }, (err: unknown) => {
      for (const ws of batch.values()) for (const w of ws) w.reject(err)
    })
  }
}

interface Waiter<R> { resolve: (r: R | undefined) => void; reject: (e: unknown) => void }
