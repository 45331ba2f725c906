// The SSE hub's fan-out of a job's end (sse-fanout): every stream gets its last frames
// and the end of its response in one corked write, the streams that already had the status
// (Last-Event-ID) get only `done`, a backpressured stream gets them once writable, and every
// slot of the account is released exactly once, whether the job's streams end together or not.
import t from 'tap'
import type { HttpResponse } from 'uWebSockets.js'
import { SseHub, eventIdOf, heartbeatTickMs } from '../../src/http/sse.js'
import { LocalStreamCounts } from '../../src/http/front-ends/shared-limits.js'
import type { JobView } from '../../src/jobs/view.js'
import { settled } from '../helpers/wait.js'

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

t.test('heartbeats go out in slices: each step writes its share of the streams, every stream once a period, none to a stream that ended', async (t) => {
  t.equal(heartbeatTickMs(15_000), 250, '15 s: a step every 250 ms')
  t.equal(heartbeatTickMs(10), 5, 'never under 5 ms')
  const period = 600
  const tick = heartbeatTickMs(period)
  t.equal(tick, 10)
  const hub = new SseHub(period, new LocalStreamCounts())
  t.teardown(() => hub.close())
  // Each step's writes, counted around the hub's own step.
  const h = hub as unknown as { beat: () => void }
  const step = h.beat.bind(hub)
  const perStep: number[] = []
  let written = 0
  h.beat = () => { const before = written; step(); if (written > before) perStep.push(written - before) }
  const beats = new Map<FakeRes, number[]>()
  const streams: FakeRes[] = []
  // 120 streams over 60 jobs, two each.
  for (let j = 0; j < 60; j++) {
    const v = { ...view('processing', 1_800_000_000_000), id: `job_beat${j}` }
    for (let k = 0; k < 2; k++) {
      const r = new FakeRes()
      const write = r.write.bind(r)
      r.write = (b: string | Buffer) => {
        if (String(b).includes('event: heartbeat')) {
          if (r.ended) t.fail('a heartbeat after the end')
          written++
          beats.get(r)!.push(performance.now())
        }
        return write(b)
      }
      beats.set(r, [])
      t.ok(hub.reserve(7, 1000))
      r.cork(() => hub.open(r as unknown as HttpResponse, () => {}, {}, v, 7, 0))
      streams.push(r)
    }
  }
  // job_beat0 ends: its streams get no heartbeat after their end (also checked on every write).
  hub.publish({ ...view('completed', 1_800_000_000_100), id: 'job_beat0' })
  await turn()
  t.ok(streams[0].ended && streams[1].ended)
  const atEnd = beats.get(streams[0])!.length
  const live = streams.slice(2)
  await settled(() => live.every(r => beats.get(r)!.length >= 2), ok => ok, { timeoutMs: 20_000, everyMs: 20 })
  t.equal(beats.get(streams[0])!.length, atEnd, 'no heartbeat to an ended stream')
  const share = Math.ceil(118 * tick / period)
  t.ok(perStep.every(n => n <= share), `no step wrote more than its share (${share}): ${Math.max(...perStep)}`)
  for (const r of live) {
    const b = beats.get(r)!
    // Timers only ever fire late: a stream's next heartbeat is never sooner than a period less a step.
    for (let i = 1; i < b.length; i++) if (b[i] - b[i - 1] < period - 2 * tick) t.fail(`heartbeats ${(b[i] - b[i - 1]).toFixed(0)} ms apart`)
  }
  t.pass('every live stream got a heartbeat each period')
})
