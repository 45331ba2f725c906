import type { HttpResponse } from 'uWebSockets.js'
import type { JobView } from '../jobs/view.js'
import { TERMINAL } from '../jobs/view.js'
import { LocalStreamCounts, type StreamCounts } from './front-ends/shared-limits.js'

/**
 * One open SSE stream (docs/api.md "Server-Sent Events"). Deliberately small: no timer and no closure of its own
 * besides uWS's onAborted/onWritable; a stream that cannot be written keeps only the latest
 * status (coalescing), so a slow reader never makes memory grow.
 */
class Stream {
  /** Last event id written (monotonic per job). */
  lastId = 0
  /** Latest undelivered event while the socket is backpressured (coalesced). */
  pending: Buffer | null = null
  pendingDone = false
  blocked = false
  closed = false
  constructor (readonly res: HttpResponse, readonly jobId: string, readonly accountId: number) {}
}

/** The event id of a job state: its update time in ms, +1 for `done`. */
export function eventIdOf (view: JobView): number {
  return Date.parse(view.updated_at)
}

function statusData (v: JobView): string {
  const d: Record<string, unknown> = { id: v.id, status: v.status, progress: v.progress }
  if (v.result_url !== null) d.result_url = v.result_url
  if (v.error_message !== null) d.error_message = v.error_message
  return JSON.stringify(d)
}

/**
 * `event: status` then, for a terminal job, `event: done` (which ends the stream). Encoded to
 * bytes once per job change: every stream of the job is sent the same Buffer, with
 * no per-stream string conversion.
 */
interface Frames { text: Buffer; id: number; done: boolean }

function framesOf (v: JobView, withStatus: boolean): Frames {
  const id = eventIdOf(v)
  const done = TERMINAL.has(v.status)
  let text = withStatus ? `id: ${id}\nevent: status\ndata: ${statusData(v)}\n\n` : ''
  if (done) text += `id: ${id + 1}\nevent: done\ndata: ${JSON.stringify({ id: v.id, status: v.status })}\n\n`
  return { text: Buffer.from(text), id: done ? id + 1 : id, done }
}

/** The heartbeat sweep's step: its period over 60, within 5-250 ms (250 ms for 15 s). */
export function heartbeatTickMs (heartbeatMs: number): number {
  return Math.min(250, Math.max(5, Math.floor(heartbeatMs / 60)))
}

/**
 * All SSE streams of this node: subscriptions by job, per-account counts for the tier caps,
 * a heartbeat for every stream each SSE_HEARTBEAT_MS (one sweep a period, written in slices),
 * fan-out of job events corked per socket, backpressure with coalescing.
 */
export class SseHub {
  private readonly byJob = new Map<string, Set<Stream>>()
  private readonly heartbeat: NodeJS.Timeout
  private readonly tickMs: number
  private count = 0
  /** The sweep in progress: where it is among the jobs and among the current job's streams. */
  private sweep: Iterator<Set<Stream>> | null = null
  private inSweep: Iterator<Stream> | null = null
  private sweepAt = -Infinity

  /** `counts`: per-account open streams, shared by every front-end thread when there are several. */
  constructor (private readonly heartbeatMs: number, private readonly counts: StreamCounts = new LocalStreamCounts()) {
    this.tickMs = heartbeatTickMs(heartbeatMs)
    this.heartbeat = setInterval(() => this.beat(), this.tickMs)
    this.heartbeat.unref()
  }

  get size (): number { return this.count }
  /** Streams the account has open on this node (every front-end thread). */
  openStreams (accountId: number): number { return this.counts.open(accountId) }

  /** Reserves a slot for the account; false when it is at `max`. */
  reserve (accountId: number, max: number): boolean { return this.counts.reserve(accountId, max) }

  release (accountId: number): void { this.counts.release(accountId, 1) }

  /**
   * Starts a stream whose slot is reserved: writes the headers and the current state (unless
   * Last-Event-ID shows the client has it), then follows the job. Must run inside res.cork.
   */
  open (res: HttpResponse, onAborted: (fn: () => void) => void, headers: Record<string, string>, view: JobView, accountId: number, lastEventId: number): void {
    const s = new Stream(res, view.id, accountId)
    res.writeStatus('200 OK')
    for (const k in headers) res.writeHeader(k, headers[k])
    res.writeHeader('Content-Type', 'text/event-stream; charset=utf-8')
    res.writeHeader('Cache-Control', 'no-cache, no-transform')
    res.writeHeader('Connection', 'keep-alive')
    res.writeHeader('X-Accel-Buffering', 'no')
    onAborted(() => this.drop(s))
    s.lastId = lastEventId
    const f = framesOf(view, eventIdOf(view) > lastEventId)
    // A retry hint, and an initial comment so proxies and clients see the stream open at once.
    res.write(`retry: 3000\n: stream for ${view.id}\n\n`)
    if (f.text.length > 0) { res.write(f.text); s.lastId = Math.max(s.lastId, f.id) }
    // done was already seen too: close at once.
    if (f.done) { s.closed = true; res.end(); this.forget(s); return }
    let set = this.byJob.get(view.id)
    if (!set) { set = new Set(); this.byJob.set(view.id, set) }
    set.add(s)
    this.count++
  }

  /** Changes waiting for the fan-out of this loop turn (see publish). */
  private readonly queued: JobView[] = []
  private flushing = false

  /**
   * A job changed (from the shards, through the job cache). Written to its streams in the check
   * phase of this loop turn, not at once: every change that reached the thread in the same turn
   * (a shard's batch, several shards' messages) is handed on first, so on the main thread the
   * other front-end threads get all of them on the thread bus before this one spends ~10 ms a
   * thousand streams on its own writes (they used to get job k+1 only once the main
   * thread had written job k). Order per job is kept (one queue); a stream opened meanwhile
   * was sent the cached state, which already holds the change, and its Last-Event-ID filter
   * keeps it from getting the change twice.
   */
  publish (view: JobView): void {
    if (!this.byJob.has(view.id)) return
    this.queued.push(view)
    if (this.queued.length === 1 && !this.flushing) setImmediate(this.flush)
  }

  private readonly flush = (): void => {
    this.flushing = true
    try {
      for (let i = 0; i < this.queued.length; i++) this.publishNow(this.queued[i])
    } finally {
      this.queued.length = 0
      this.flushing = false
    }
  }

  private publishNow (view: JobView): void {
    const set = this.byJob.get(view.id)
    if (!set) return
    const id = eventIdOf(view)
    const full = framesOf(view, true)
    if (full.done) { this.finish(set, view, id, full); return }
    for (const s of set) {
      // Already seen (Last-Event-ID): never repeat a status.
      if (id <= s.lastId) continue
      s.lastId = Math.max(s.lastId, full.id)
      if (s.blocked) { s.pending = full.text; s.pendingDone = false; continue }
      this.write(s, full.text, false)
    }
  }

  /**
   * The job ended: every stream of it gets its last frames and the end of the response in one
   * corked write (one send per stream), with no per-stream closure, map or counter update: the
   * job's entry and the account's slots are dropped once for the whole set (sse-fanout).
   * A backpressured stream keeps the frames as pending and is forgotten when they are written.
   */
  private finish (set: Set<Stream>, view: JobView, id: number, full: Frames): void {
    let doneOnly: Frames | null = null
    let ended = 0
    let account = -1
    let run = 0
    for (const s of set) {
      // A client that already has the status (Last-Event-ID) still gets `done`.
      const f = id <= s.lastId ? (doneOnly ??= framesOf(view, false)) : full
      s.lastId = Math.max(s.lastId, f.id)
      if (s.blocked) { s.pending = f.text; s.pendingDone = true; continue }
      s.closed = true
      s.pending = null
      this.endRes = s.res
      this.endText = f.text
      s.res.cork(this.endCorked)
      ended++
      if (s.accountId !== account) {
        if (run > 0) this.counts.release(account, run)
        account = s.accountId
        run = 0
      }
      run++
    }
    this.endRes = null
    this.endText = null
    if (run > 0) this.counts.release(account, run)
    this.count -= ended
    if (ended === set.size) { this.byJob.delete(view.id); return }
    for (const s of set) if (s.closed) set.delete(s)
  }

  /** What endCorked ends (no closure per stream during a fan-out). */
  private endRes: HttpResponse | null = null
  private endText: Buffer | null = null
  private readonly endCorked = (): void => { this.endRes!.end(this.endText!) }

  private write (s: Stream, text: Buffer, done: boolean): void {
    if (done) {
      // The last frames and the end of the response in one cork: one send per stream, which
      // matters when one job change fans out to thousands of streams.
      s.closed = true
      s.res.cork(() => s.res.end(text))
      this.forget(s)
      return
    }
    let ok = true
    s.res.cork(() => { ok = s.res.write(text) })
    if (!ok) {
      s.blocked = true
      s.res.onWritable(() => {
        s.blocked = false
        const p = s.pending
        if (p === null) return true
        const d = s.pendingDone
        s.pending = null
        this.write(s, p, d)
        return true
      })
    }
  }

  private end (s: Stream): void {
    if (s.closed) return
    s.closed = true
    s.res.cork(() => s.res.end())
    this.forget(s)
  }

  private drop (s: Stream): void {
    if (s.closed) return
    s.closed = true
    this.forget(s)
  }

  private forget (s: Stream): void {
    const set = this.byJob.get(s.jobId)
    if (set?.delete(s)) {
      this.count--
      if (set.size === 0) this.byJob.delete(s.jobId)
    }
    s.pending = null
    this.counts.release(s.accountId, 1)
  }

  /**
   * One step of the heartbeat sweep (docs/decisions.md "SSE heartbeats written in slices"): the
   * sweep visits every stream once a period, a step its share of the streams (count x tick /
   * period), so 5,000 streams cost the thread ~1.5 ms every 250 ms instead of ~80 ms at once
   * every 15 s, a stall every job event on the thread waited behind. A sweep starts one period
   * after the last one started; the iterators see streams opened meanwhile (a new job's at the
   * end of this sweep) and skip the closed ones.
   */
  private beat (): void {
    if (this.count === 0) { this.sweep = null; this.inSweep = null; return }
    const now = Date.now()
    let budget = Math.ceil(this.count * this.tickMs / this.heartbeatMs)
    let ts: string | null = null
    while (budget > 0) {
      if (this.inSweep === null) {
        if (this.sweep === null) {
          if (now - this.sweepAt < this.heartbeatMs - this.tickMs) return
          this.sweep = this.byJob.values()
          this.sweepAt = now
        }
        const set = this.sweep.next()
        if (set.done === true) { this.sweep = null; return }
        this.inSweep = set.value.values()
      }
      const next = this.inSweep.next()
      if (next.done === true) { this.inSweep = null; continue }
      const s = next.value
      // A heartbeat never queues behind a slow reader, nor goes to a stream that ended.
      if (s.blocked || s.closed) continue
      ts ??= new Date(now).toISOString()
      const text = `id: ${s.lastId}\nevent: heartbeat\ndata: {"ts":"${ts}"}\n\n`
      s.res.cork(() => { s.res.write(text) })
      budget--
    }
  }

  close (): void {
    clearInterval(this.heartbeat)
    for (const set of [...this.byJob.values()]) for (const s of [...set]) this.end(s)
  }
}
