import { ApiError } from '../errors.js'
import type { JobCaller } from '../domain.js'
import { refuseConcurrency } from './decide.js'
import type { RedisInFlight } from './inflight.js'

type Key = number | null

/**
 * An account's in-flight jobs per API key (docs/api.md "Usage and limits" max_concurrent). In memory always (one
 * node: the authority); with REDIS_URL the slot itself is taken in Redis (inflight.ts), which
 * every node shares, and memory is only the fallback while Redis cannot be reached.
 */
export class KeySlots {
  private readonly inFlight = new Map<Key, number>()
  /** Creations decided but not committed yet (not in the jobs table). */
  private readonly pending = new Map<Key, number>()

  constructor (
    private readonly accountId: number, private readonly redis: RedisInFlight | null,
    private readonly log: (msg: string, extra?: Record<string, unknown>) => void
  ) {}

  get shared (): boolean { return this.redis !== null }
  /** No creation decided and not yet settled (actor eviction, eviction.ts). */
  get idle (): boolean { return this.pending.size === 0 }

  /** Counts from the jobs table (load or reload), plus what is decided but not committed. */
  reset (counts: Map<Key, number>): void {
    this.inFlight.clear()
    for (const [k, n] of counts) this.inFlight.set(k, n)
    for (const [k, n] of this.pending) bump(this.inFlight, k, n)
  }

  /** Takes a slot for job `id` or throws 429; true when Redis holds it (release it on refusal). */
  async take (caller: Pick<JobCaller, 'keyId' | 'maxConcurrent'>, id: string): Promise<boolean> {
    if (this.redis !== null) {
      try {
        const a = await this.redis.acquire({ accountId: this.accountId, keyId: caller.keyId }, id, caller.maxConcurrent)
        if (a.ok) return true
        throw refuseConcurrency(caller, a.n)!
      } catch (err) {
        if (err instanceof ApiError) throw err
        this.log('redis in-flight check failed; counting this node only', { err: String(err) })
      }
    }
    const refused = refuseConcurrency(caller, this.inFlight.get(caller.keyId) ?? 0)
    if (refused) throw refused
    return false
  }

  /** A decided creation holds its slot until it commits or fails. */
  hold (keyId: Key): void { bump(this.inFlight, keyId, 1); bump(this.pending, keyId, 1) }

  /** The creation committed (running: the slot stays with the job) or did not. */
  settle (keyId: Key, id: string, running: boolean): void {
    bump(this.pending, keyId, -1)
    if (!running) this.end(keyId, id, true)
  }

  /** A job runs here that was not created here (resume, cancel of another node's job). */
  run (keyId: Key, id: string, counted: boolean): void {
    if (counted) bump(this.inFlight, keyId, 1)
    this.redis?.renew([{ accountId: this.accountId, keyId, jobId: id }]).catch(() => {})
  }

  /** The job ended (release: its slot is ours to free) or moved to another node. */
  end (keyId: Key, id: string, release: boolean): void {
    bump(this.inFlight, keyId, -1)
    if (release) this.free(keyId, id)
  }

  free (keyId: Key, id: string): void {
    this.redis?.release({ accountId: this.accountId, keyId }, id).catch(err => this.log('redis in-flight release failed', { err: String(err) }))
  }
}

function bump (m: Map<Key, number>, k: Key, d: number): void {
  const n = (m.get(k) ?? 0) + d
  if (n <= 0) m.delete(k)
  else m.set(k, n)
}
