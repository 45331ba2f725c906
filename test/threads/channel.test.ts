// The one channel between threads (docs/architecture.md "Messages between threads"), on a
// MessageChannel pair: ask/reply both ways, tells, one post per turn, errors crossing as
// codes, asks that time out, and a peer that goes away failing what is pending.
import t from 'tap'
import { MessageChannel } from 'node:worker_threads'
import { ApiError } from '../../src/errors.js'
import { Channel, type Handlers } from '../../src/threads/channel.js'

/** What side A sends (and B answers). */
interface A {
  asks: {
    add: { req: { a: number; b: number }; res: number }
    refuse: { req: { retryAfter: number }; res: null }
    throws: { req: Record<never, never>; res: null }
    never: { req: Record<never, never>; res: null }
    db: { req: Record<never, never>; res: null }
    echo: { req: unknown; res: string }
  }
  tells: { note: { text: string } }
}
/** What side B sends (and A answers). */
interface B {
  asks: { whoami: { req: Record<never, never>; res: string } }
  tells: { seen: { n: number } }
}

class DbDown extends Error {}

function pair (bHandlers: Partial<Handlers<A>> = {}) {
  const { port1, port2 } = new MessageChannel()
  let posts = 0
  const counted = port1.postMessage.bind(port1)
  port1.postMessage = (v: unknown, tr?: any) => { posts++; counted(v, tr) }
  const notes: string[] = []
  const seen: number[] = []
  const a = Channel.over<A, B>(port1, {
    peer: 'b',
    handlers: { whoami: async () => 'a' },
    onTell: (m) => { seen.push(m.body.n) },
  })
  const b = Channel.over<B, A>(port2, {
    peer: 'a',
    handlers: {
      add: async ({ a, b }) => a + b,
      refuse: async ({ retryAfter }) => { throw new ApiError('RATE_LIMIT_EXCEEDED', 'slow down', { retry_after: retryAfter }) },
      throws: () => { throw new Error('a bug with internals in its message') },
      never: () => new Promise<null>(() => {}),
      db: async () => { throw new DbDown('connection refused') },
      echo: async (v) => typeof v,
      ...bHandlers,
    },
    onTell: (m) => { if (m.tag === 'note') notes.push(m.body.text) },
    failure: (err) => err instanceof DbDown ? new ApiError('SERVICE_UNAVAILABLE', 'database unreachable') : new ApiError('INTERNAL_ERROR'),
  })
  return { a, b, port1, port2, notes, seen, posts: () => posts, close: () => { a.close(); b.close(); port1.close(); port2.close() } }
}

t.test('asks are answered both ways and paired by id; tells arrive; one post per turn', async (t) => {
  const p = pair()
  t.teardown(p.close)
  const sums = await Promise.all(Array.from({ length: 50 }, (_, i) => p.a.ask('add', { a: i, b: 1000 })))
  t.same(sums, Array.from({ length: 50 }, (_, i) => i + 1000), 'each reply went to its own ask')
  t.equal(p.posts(), 1, 'fifty asks of one turn crossed as one post')
  t.equal(await p.b.ask('whoami', {}), 'a', 'the other side asks too')
  p.a.tell('note', { text: 'hello' })
  p.b.tell('seen', { n: 7 })
  await p.a.ask('add', { a: 0, b: 0 }) // a round trip: the tells, posted earlier on the same ports, arrived first
  await p.b.ask('whoami', {})
  t.same(p.notes, ['hello'])
  t.same(p.seen, [7])
  t.equal(p.a.size, 0, 'nothing left pending')
})

t.test('errors cross as codes and are rebuilt as the ApiError on arrival', async (t) => {
  const p = pair()
  t.teardown(p.close)
  const refused = await p.a.ask('refuse', { retryAfter: 7 }).catch(e => e)
  t.ok(refused instanceof ApiError)
  t.equal(refused.code, 'RATE_LIMIT_EXCEEDED')
  t.equal(refused.status, 429)
  t.equal(refused.message, 'slow down')
  t.equal(refused.extra.retry_after, 7, 'extra crosses with it')
  t.same(refused.headers, { 'Retry-After': '7' }, 'rebuilt: the 429 carries its header again')
  const bug = await p.a.ask('throws', {}).catch(e => e)
  t.ok(bug instanceof ApiError)
  t.equal(bug.code, 'INTERNAL_ERROR', 'a failure that is not an ApiError is INTERNAL_ERROR')
  t.notMatch(bug.message, /internals/, 'its message does not cross')
  const db = await p.a.ask('db', {}).catch(e => e)
  t.equal(db.code, 'SERVICE_UNAVAILABLE', 'the answering side maps its own failures (failure option)')
  const unknown = await (p.a as any).ask('nope', {}).catch((e: unknown) => e)
  t.equal(unknown.code, 'INTERNAL_ERROR', 'an ask with no handler fails, it is not left pending')
})

t.test('an ask not answered in time fails with INTERNAL_ERROR; the others are untouched', async (t) => {
  const p = pair()
  t.teardown(p.close)
  const started = Date.now()
  const late = p.a.ask('never', {}, 50).catch(e => e)
  const onTime = p.a.ask('add', { a: 1, b: 2 }, 50)
  t.equal(await onTime, 3)
  const e = await late
  t.ok(e instanceof ApiError)
  t.equal(e.code, 'INTERNAL_ERROR')
  t.match(e.message, /b did not answer in time/)
  t.ok(Date.now() - started >= 50, 'not before its deadline')
  t.equal(p.a.size, 0)
})

t.test('the peer going away fails everything pending, and later asks, with INTERNAL_ERROR', async (t) => {
  const p = pair()
  t.teardown(p.close)
  const pending = Array.from({ length: 5 }, () => p.a.ask('never', {}, 60_000).catch(e => e))
  await new Promise(resolve => setImmediate(resolve)) // posted
  p.port2.close() // the other end's thread ended: its port closes
  const errors = await Promise.all(pending)
  for (const e of errors) {
    t.ok(e instanceof ApiError)
    t.equal(e.code, 'INTERNAL_ERROR')
    t.match(e.message, /b closed its channel.*safe to retry/)
  }
  const after = await p.a.ask('add', { a: 1, b: 1 }).catch(e => e)
  t.equal(after.code, 'INTERNAL_ERROR', 'a closed channel refuses at once')
})

t.test('failAll (a worker that exited and is restarted) fails what is pending and drops what was not posted', async (t) => {
  const posted: unknown[] = []
  const ch = new Channel<A, B>({ postMessage: (v) => posted.push(v) }, { peer: 'shard 1', handlers: { whoami: async () => 'x' } })
  t.teardown(() => ch.close())
  const a = ch.ask('add', { a: 1, b: 1 }).catch(e => e)
  const b = ch.ask('never', {}).catch(e => e)
  ch.failAll('shard 1 exited')
  for (const e of await Promise.all([a, b])) {
    t.equal(e.code, 'INTERNAL_ERROR')
    t.match(e.message, /shard 1 exited/)
  }
  await new Promise(resolve => setImmediate(resolve))
  t.equal(posted.length, 0, 'the asks that failed were not sent to the next worker')
  const c = ch.ask('add', { a: 2, b: 2 })
  c.catch(() => {})
  ch.flush()
  t.equal(posted.length, 1, 'the channel stays usable for the restarted worker')
  ch.receive({ rep: [{ id: (posted[0] as any).ask[0].id, ok: true, value: 4 }] })
  t.equal(await c, 4)
})

t.test('a message that cannot cross fails alone: the other asks of its turn are answered', async (t) => {
  const p = pair()
  t.teardown(p.close)
  let deep: unknown = 1
  for (let i = 0; i < 50_000; i++) deep = { a: deep }
  const asks = [p.a.ask('add', { a: 1, b: 2 }), p.a.ask('echo', () => 'a function does not clone'), p.a.ask('echo', deep), p.a.ask('add', { a: 3, b: 4 })]
  const [one, fn, tooDeep, two] = await Promise.allSettled(asks)
  t.same(one, { status: 'fulfilled', value: 3 })
  t.same(two, { status: 'fulfilled', value: 7 }, 'asked after the bad ones, in the same turn')
  for (const r of [fn, tooDeep]) {
    t.equal(r.status, 'rejected')
    t.equal((r as PromiseRejectedResult).reason.code, 'INTERNAL_ERROR')
    t.match((r as PromiseRejectedResult).reason.message, /could not be posted/)
  }
  t.equal(p.a.size, 0, 'nothing left pending')
})
