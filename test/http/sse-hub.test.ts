// The SSE hub's fan-out of a job's end (sse-fanout): every stream gets its last frames
// and the end of its response in one corked write, the streams that already had the status
// (Last-Event-ID) get only `done`, a backpressured stream gets them once writable, and every
// slot of the account is released exactly once, whether the job's streams end together or not.
import t from 'tap'
import type { HttpResponse } from 'uWebSockets.js'
import { SseHub, eventIdOf } from '../../src/http/sse.js'
import { LocalStreamCounts } from '../../src/http/front-ends/shared-limits.js'
import type { JobView } from '../../src/jobs/view.js'

/** A stand-in for uWS's HttpResponse: records what is written, inside or outside a cork. */
class FakeRes {
  chunks: string[] = []
  ended = false
  corked = 0
  /** Writes refused (backpressure) until `drain`. */
  full = false
  writable: (() => boolean) | null = null
  private inCork = false
  cork (fn: () => void): this { this.inCork = true; this.corked++; try { fn() } finally { this.inCork = false } return this }
  writeStatus (): this { return this }
  writeHeader (): this { return this }
  write (b: string | Buffer): boolean { this.chunks.push(String(b)); return !this.full }
  end (b?: string | Buffer): this {
    if (!this.inCork) throw new Error('end outside a cork')
    if (this.ended) throw new Error('ended twice')
    if (b !== undefined) this.chunks.push(String(b))
    this.ended = true
    return this
  }
  onWritable (fn: () => boolean): this { this.writable = fn; return this }
  drain (): void { this.full = false; this.writable?.() }
  /** The `event:` names written, in order. */
  get events (): string[] { return this.chunks.join('').split('\n').filter(l => l.startsWith('event: ')).map(l => l.slice(7)) }
}

/** One loop turn: the hub writes a turn's changes in its check phase (setImmediate). */
const turn = () => new Promise<void>(resolve => setImmediate(resolve))

const at = (ms: number): string => new Date(ms).toISOString()
function view (status: JobView['status'], ms: number): JobView {
  return { id: 'job_hubtest', status, progress: status === 'cancelled' ? 0 : 10, result_url: null, error_message: status === 'cancelled' ? 'Cancelled' : null, updated_at: at(ms) } as JobView
}

t.test('a job end fans out to every stream once, releases every slot, and keeps a blocked stream until it is writable', async (t) => {
  const counts = new LocalStreamCounts()
  const hub = new SseHub(60_000, counts)
  t.teardown(() => hub.close())
  const queued = view('queued', 1_800_000_000_000)
  const res: FakeRes[] = []
  const open = (accountId: number, lastEventId: number): FakeRes => {
    const r = new FakeRes()
    t.ok(hub.reserve(accountId, 1000))
    r.cork(() => hub.open(r as unknown as HttpResponse, () => {}, {}, queued, accountId, lastEventId))
    res.push(r)
    return r
  }
  // 50 streams of account 7, 3 of account 8 (a ticket's account is the job's; the hub must not care).
  for (let i = 0; i < 50; i++) open(7, 0)
  for (let i = 0; i < 3; i++) open(8, 0)
  t.equal(hub.size, 53)
  t.equal(counts.open(7), 50)
  // One stream is backpressured when the job ends.
  const slow = res[10]
  slow.full = true
  const cancelled = view('cancelled', 1_800_000_000_500)
  // A client that reconnected with the cancelled status's id already has it: only `done` for it.
  const resumed = open(7, eventIdOf(cancelled))
  t.same(resumed.events, [], 'the resumed stream was sent nothing yet')
  hub.publish(view('processing', 1_800_000_000_100))
  await turn()
  t.ok(slow.writable, 'the slow stream waits for onWritable')
  const before = slow.events.length
  hub.publish(cancelled)
  await turn()
  for (const r of res) {
    if (r === slow || r === resumed) continue
    t.ok(r.ended, 'ended')
    t.same(r.events.slice(-2), ['status', 'done'], 'status then done')
  }
  t.ok(resumed.ended)
  t.same(resumed.events, ['done'], 'a stream that had the status gets only done')
  t.notOk(slow.ended, 'the blocked stream is not written yet')
  t.equal(slow.events.length, before)
  t.equal(hub.size, 1, 'only the blocked stream is still held')
  t.equal(counts.open(7), 1, 'account 7: the blocked stream keeps its slot')
  t.equal(counts.open(8), 0, 'account 8: every slot released')
  slow.drain()
  t.ok(slow.ended, 'written once writable')
  t.same(slow.events.slice(-2), ['status', 'done'])
  t.equal(hub.size, 0)
  t.equal(counts.open(7), 0, 'and its slot released')
  // Every stream's final frames went out in one corked end (one send).
  const ends = res.filter(r => r !== slow).map(r => r.chunks[r.chunks.length - 1])
  t.ok(ends.every(c => c.includes('event: done')), 'the last chunk of each stream carries done')
  // Later streams of the same job are followed again from scratch.
  const again = open(9, 0)
  t.equal(hub.size, 1)
  hub.publish(view('cancelled', 1_800_000_000_500))
  await turn()
  t.ok(again.ended)
  t.equal(counts.open(9), 0)
})

t.test('changes are written after the turn that published them, all of them, in order', async (t) => {
  // On the main thread the job events of one turn are all posted on the thread bus before any
  // stream is written: the hub must not write inside publish.
  const hub = new SseHub(60_000, new LocalStreamCounts())
  t.teardown(() => hub.close())
  const r = new FakeRes()
  t.ok(hub.reserve(7, 10))
  r.cork(() => hub.open(r as unknown as HttpResponse, () => {}, {}, view('queued', 1_800_000_000_000), 7, 0))
  const opened = r.chunks.length
  hub.publish(view('processing', 1_800_000_000_100))
  hub.publish(view('cancelled', 1_800_000_000_200))
  t.equal(r.chunks.length, opened, 'nothing written inside publish')
  await turn()
  t.same(r.events, ['status', 'status', 'status', 'done'], 'queued, then processing, cancelled and done in order')
  t.match(r.chunks.join(''), /"status":"queued"[^]*"status":"processing"[^]*"status":"cancelled"/)
  t.ok(r.ended)
  t.equal(hub.size, 0)
  // A job without streams queues nothing.
  hub.publish({ ...view('processing', 1_800_000_000_300), id: 'job_nostreams' })
  await turn()
  t.equal(hub.size, 0)
})
