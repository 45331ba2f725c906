import type { JobRow } from '../jobs/view.js'

/**
 * Job rows read by id for waiting jobs whose callback came (docs/architecture.md "Waiting
 * jobs"): the reads asked for in one turn of the event loop go to PostgreSQL as one SELECT
 * (`read`, e.g. jobsByIds), so a burst of callbacks costs one round trip per turn, not one per
 * job, and no account waits for another's read.
 */
export class RowReads {
  private pending: Map<string, Array<Waiter>> | null = null

  constructor (private readonly read: (ids: string[]) => Promise<JobRow[]>) {}

  /** The job's row, or undefined when it is gone. Rejects when the read failed. */
  get (id: string): Promise<JobRow | undefined> {
    return new Promise((resolve, reject) => {
      if (this.pending === null) {
        this.pending = new Map()
        setImmediate(this.flush)
      }
      const waiters = this.pending.get(id)
      if (waiters) waiters.push({ resolve, reject })
      else this.pending.set(id, [{ resolve, reject }])
    })
  }

  private readonly flush = (): void => {
    const batch = this.pending!
    this.pending = null
    this.read([...batch.keys()]).then((rows) => {
      for (const r of rows) {
        const ws = batch.get(r.id)
        if (ws === undefined) continue
        batch.delete(r.id)
        for (const w of ws) w.resolve(r)
      }
      for (const ws of batch.values()) for (const w of ws) w.resolve(undefined)
    }, (err: unknown) => {
      for (const ws of batch.values()) for (const w of ws) w.reject(err)
    })
  }
}

interface Waiter { resolve: (r: JobRow | undefined) => void; reject: (e: unknown) => void }
