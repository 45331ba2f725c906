/**
 * A shard's waiting upstream jobs (docs/architecture.md "Waiting jobs"): jobs a real provider
 * holds and that have nothing to do before their next reconciliation poll (or their callback)
 * are not live objects. Each is one small record here: a Map keyed by job id (a callback finds
 * its job without a scan) and a binary min-heap of due times, armed with ONE timer per shard.
 * When records come due, the shard reads their rows in one SELECT per batch and runs them
 * again as live jobs (shard-worker.ts); a job that is still running afterwards parks here
 * again. Due times are kept in 10 ms units since this module loaded, so they stay small
 * integers (no boxed number per record).
 */

/** Due-time unit (ms). */
const UNIT_MS = 10
const EPOCH = Date.now()
/** A batch of due jobs woken at once (one SELECT). */
const WAKE_BATCH = 256

/**
 * Upstream state labels ("running 40", "queued"...) are few: each record points at one shared
 * copy instead of keeping its own string (docs/architecture.md "Waiting jobs"). Bounded: past
 * LABELS_MAX distinct labels a record keeps its own.
 */
const LABELS_MAX = 1024
const labels = new Map<string, string>()
function shared (label: string | null): string | null {
  if (label === null) return null
  const have = labels.get(label)
  if (have !== undefined) return have
  if (labels.size < LABELS_MAX) labels.set(label, label)
  return label
}

/** A callback state that arrived while its job was being woken (rare: kept off the records). */
const pushedStates = new WeakMap<WaitingJob, unknown>()

/**
 * One waiting job: what its wake-up and its callback need, nothing more. Six small integers
 * (V8 Smis, kept in the object) and two pointers: its id and a shared label; no optional field,
 * so every record has the same layout (docs/architecture.md "Waiting jobs").
 */
export class WaitingJob {
  constructor (
    readonly id: string,
    readonly account: number,
    /** API key id (-1: none): the per-key in-flight slot is renewed with it (several nodes). */
    readonly key: number,
    /** Due, in UNIT_MS since EPOCH. */
    public due: number,
    /** Reconciliation polls made since submission (job-actor.ts pollDelay). */
    readonly polls: number,
    /** The last upstream state recorded in the job's history (not written again); shared. */
    readonly label: string | null,
    /** Position in the heap; -1 while being woken. */
    public at: number,
  ) {}

  /** A callback state that arrived while the job was being woken (delivered at wake-up). */
  get pushed (): unknown { return pushedStates.get(this) }
  set pushed (v: unknown) { pushedStates.set(this, v) }
}

export function unitsOf (ms: number): number { return Math.ceil((ms - EPOCH) / UNIT_MS) }
export function msOf (units: number): number { return EPOCH + units * UNIT_MS }

export class WaitingJobs {
  private readonly byId = new Map<string, WaitingJob>()
  private readonly heap: WaitingJob[] = []
  private timer: NodeJS.Timeout | null = null
  /** When the timer fires (units), or Infinity. */
  private armedFor = Infinity
  /** Jobs woken by their due time and not parked or ended yet (at most `maxActive`). */
  active = 0

  /**
   * `wake` gets the due records (taken out of the heap, still known by id until `woken`); it
   * must call `woken(rec)` for each, once it runs again or was dropped.
   */
  constructor (private readonly wake: (due: WaitingJob[]) => void, readonly maxActive = 64) {}

  get size (): number { return this.byId.size }
  has (id: string): boolean { return this.byId.has(id) }
  get (id: string): WaitingJob | undefined { return this.byId.get(id) }

  /** Parks a job until `dueMs` (its callback may come first). */
  add (id: string, account: number, key: number | null, dueMs: number, polls: number, label: string | null): void {
    const old = this.byId.get(id)
    if (old) this.remove(old)
    const rec = new WaitingJob(id, account, key ?? -1, unitsOf(dueMs), polls, shared(label), -1)
    this.byId.set(id, rec)
    this.push(rec)
    this.arm()
  }

  /**
   * A callback came for a waiting job: its record leaves the heap but stays known by id while
   * its row is read (a second callback meanwhile finds it being woken: `claim` answers null
   * and keeps the state in `pushed`). The caller then runs it (`woken`) or puts it
   * back (`unclaim`). Null for unknown ids and records already being woken.
   */
  claim (id: string, pushed?: unknown): WaitingJob | null {
    const rec = this.byId.get(id)
    if (!rec) return null
    if (rec.at < 0) { if (pushed !== undefined) rec.pushed = pushed; return null }
    this.cut(rec.at)
    rec.at = -1
    return rec
  }

  /** A claimed record goes back to waiting, due at `dueMs` or as it was (its row could not be read, or the callback was not its own). */
  unclaim (rec: WaitingJob, dueMs?: number): void {
    if (this.byId.get(rec.id) !== rec || rec.at >= 0) return
    if (dueMs !== undefined) rec.due = unitsOf(dueMs)
    this.push(rec)
    this.arm()
  }

  /** A woken record runs again (or was dropped): it leaves the index. */
  woken (rec: WaitingJob): void {
    if (this.byId.get(rec.id) === rec) this.byId.delete(rec.id)
  }

  /** A woken job parked again or ended: room for the next due one. */
  settled (): void {
    if (this.active > 0) this.active--
    this.arm()
  }

  /** Puts woken records back (their rows could not be read): due again after `ms`. */
  retry (recs: WaitingJob[], ms: number): void {
    const due = unitsOf(Date.now() + ms)
    for (const r of recs) {
      if (this.active > 0) this.active--
      if (this.byId.get(r.id) !== r || r.at >= 0) continue
      r.due = due
      this.push(r)
    }
    this.arm()
  }

  /** Every waiting job (the per-key in-flight renewal of several nodes). */
  values (): IterableIterator<WaitingJob> { return this.byId.values() }

  close (): void { if (this.timer) clearTimeout(this.timer); this.timer = null; this.armedFor = Infinity }

  private remove (rec: WaitingJob): void {
    this.byId.delete(rec.id)
    if (rec.at >= 0) this.cut(rec.at)
    rec.at = -1
  }

  private arm (): void {
    const top = this.heap[0]
    if (top === undefined || this.active >= this.maxActive) return
    if (this.timer !== null && this.armedFor <= top.due) return
    if (this.timer !== null) clearTimeout(this.timer)
    this.armedFor = top.due
    this.timer = setTimeout(this.fire, Math.max(0, msOf(top.due) - Date.now()))
    this.timer.unref()
  }

  private readonly fire = (): void => {
    this.timer = null
    this.armedFor = Infinity
    const now = unitsOf(Date.now())
    const due: WaitingJob[] = []
    while (this.heap.length > 0 && this.heap[0].due <= now && this.active < this.maxActive && due.length < WAKE_BATCH) {
      const rec = this.heap[0]
      this.cut(0)
      rec.at = -1
      this.active++
      due.push(rec)
    }
    if (due.length > 0) this.wake(due)
    this.arm()
  }

  // The binary heap, ordered by `due`; each record knows its position (`at`).
  private push (rec: WaitingJob): void {
    rec.at = this.heap.length
    this.heap.push(rec)
    this.up(rec.at)
  }

  private cut (i: number): void {
    const last = this.heap.pop()!
    if (i < this.heap.length) {
      this.heap[i] = last
      last.at = i
      this.down(i)
      this.up(last.at)
    }
  }

  private up (i: number): void {
    const h = this.heap
    const x = h[i]
    while (i > 0) {
      const p = (i - 1) >> 1
      if (h[p].due <= x.due) break
      h[i] = h[p]; h[i].at = i
      i = p
    }
    h[i] = x; x.at = i
  }

  private down (i: number): void {
    const h = this.heap
    const n = h.length
    const x = h[i]
    for (;;) {
      let c = 2 * i + 1
      if (c >= n) break
      if (c + 1 < n && h[c + 1].due < h[c].due) c++
      if (h[c].due >= x.due) break
      h[i] = h[c]; h[i].at = i
      i = c
    }
    h[i] = x; x.at = i
  }
}
