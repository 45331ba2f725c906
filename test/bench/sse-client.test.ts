// sse-fanout's load generators (bench/lib/sse-client.c driven by bench/lib/sse-native.ts, and
// the Node client bench/lib/sse-client.ts): a stream counts as open only on a 200, `event: done`
// is found also when it is split across two reads, a stream without done reports 0, and the
// done times are on performance.now()'s clock (after the write that ended them). And the
// runner's table names each service side's rows when a scenario measures several.
import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { table } from '../../bench/run.js'
import { closeStreams, openStreams } from '../../bench/lib/sse-client.js'
import { nativeClient, openNative, openSse } from '../../bench/lib/sse-native.js'
import { until } from '../../bench/lib/scenario.js'

/** An SSE server: /ok/<i> streams, /missing answers 404; `end(i)` writes stream i's done in two pieces. */
async function sseServer (): Promise<{ port: number; open: () => number; end: (i: number) => Promise<void>; close: () => Promise<void> }> {
  const streams = new Map<number, ServerResponse>()
  const server = createServer((req, res) => {
    const m = /^\/ok\/(\d+)$/.exec(req.url ?? '')
    if (!m) { res.writeHead(404).end('no'); return }
    // No chunked framing (the body ends with the connection), so the split below falls inside
    // the text the client scans, not between two chunk headers.
    res.useChunkedEncodingByDefault = false
    res.writeHead(200, { 'content-type': 'text/event-stream', connection: 'close' })
    res.write('retry: 3000\n: open\n\n')
    streams.set(Number(m[1]), res)
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  return {
    port: (server.address() as AddressInfo).port,
    open: () => streams.size,
    async end (i) {
      const res = streams.get(i)!
      // Split inside "event: done": the client must join the two reads.
      res.write('id: 1\nevent: status\ndata: {}\n\nid: 2\nevent: do')
      await new Promise(resolve => setTimeout(resolve, 30))
      res.end('ne\ndata: {}\n\n')
    },
    close: () => new Promise<void>(resolve => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}

const path = (i: number) => i % 5 === 4 ? '/missing' : `/ok/${i}`

const bin = nativeClient()

t.test('C client: opens, counts statuses, finds a split done, reports 0 without done', { skip: bin === null ? 'no C compiler here' : false }, async (t) => {
  if (bin === null) return
  const s = await sseServer()
  t.teardown(s.close)
  const c = await openNative(bin, { port: s.port, n: 20, path, headers: () => ({ accept: 'text/event-stream' }) })
  t.teardown(c.close)
  t.equal(c.count, 16)
  t.equal(c.failed, 4)
  t.same(c.statuses, { 200: 16, 404: 4 })
  t.ok(await until(() => s.open() === 16, 5000, 10))
  const before = performance.now()
  for (let i = 0; i < 20; i++) if (i % 5 !== 4 && i !== 7) await s.end(i)
  const times = await c.done(500)
  const after = performance.now()
  t.equal(times.length, 20, 'one time per requested stream, in request order')
  t.same(times.map((x, i) => x === 0 ? i : -1).filter(i => i >= 0), [4, 7, 9, 14, 19], 'the stream that got no done and the four not opened report 0')
  for (const x of times.filter(x => x > 0)) t.ok(x >= before && x <= after, `done time ${x} within [${before}, ${after}]`)
  t.ok(await c.cpuUs() > 0)
})

t.test('Node client: the same streams, the same counts and split done', async (t) => {
  const s = await sseServer()
  t.teardown(s.close)
  const r = await openStreams({ port: s.port, n: 20, path, headers: () => ({ accept: 'text/event-stream' }) })
  t.teardown(() => closeStreams(r.streams))
  t.equal(r.streams.length, 16)
  t.equal(r.failed, 4)
  t.ok(await until(() => s.open() === 16, 5000, 10))
  for (let i = 0; i < 20; i++) if (i % 5 !== 4 && i !== 7) await s.end(i)
  t.ok(await until(() => r.streams.filter(x => x.doneAt > 0).length === 15, 5000, 10))
  await new Promise(resolve => setTimeout(resolve, 100))
  t.equal(r.streams.filter(x => x.doneAt === 0).length, 1)
})

t.test('openSse: either client gives each requested stream its done time in request order', async (t) => {
  for (const client of bin === null ? ['node'] : ['c', 'node']) {
    const prev = process.env.SSE_CLIENT
    if (client === 'node') process.env.SSE_CLIENT = 'node'
    const s = await sseServer()
    const r = await openSse({ port: s.port, n: 20, path, headers: () => ({ accept: 'text/event-stream' }) })
    if (prev === undefined) delete process.env.SSE_CLIENT; else process.env.SSE_CLIENT = prev
    t.equal(r.count, 16, `${client}: 16 opened`)
    t.ok(await until(() => s.open() === 16, 5000, 10))
    for (let i = 0; i < 20; i++) if (i % 5 !== 4 && i !== 7) await s.end(i)
    const times = await r.done(500)
    t.same(times.map((x, i) => x === 0 ? i : -1).filter(i => i >= 0), [4, 7, 9, 14, 19], `${client}: zeros where no done was seen`)
    await r.close()
    await s.close()
  }
})

t.test('table: one row set per service side, named after it', async (t) => {
  const m = (p99: number) => ({ delivery_p99_ms: p99, delivered: 10 })
  const out = table([{
    name: 'sse-fanout',
    title: 't',
    seconds: 1,
    sides: [{ name: 'service FRONTENDS=2', role: 'service' }, { name: 'service FRONTENDS=1', role: 'service' }, { name: 'base', role: 'baseline' }],
    medians: { 'service FRONTENDS=2': m(90), 'service FRONTENDS=1': m(150), base: m(300) },
    targets: [{ metric: 'delivery_p99_ms', kind: 'absolute', op: '<=', value: 100, service: 90, baselineValue: null, ratio: null, met: true }],
    show: ['delivered', 'delivery_p99_ms'],
  }])
  t.match(out, /delivery p99 \(ms\) \[service FRONTENDS=2\] +\| 90 +\| +\| +\| <= 100 \| yes/)
  t.match(out, /delivery p99 \(ms\) \[service FRONTENDS=2\] +\| 90 +\| 300 \(base\) \| 0\.300/)
  t.match(out, /delivery p99 \(ms\) \[service FRONTENDS=1\] +\| 150 +\| 300 \(base\) \| 0\.500/)
  t.match(out, /streams that saw done \[service FRONTENDS=1\] \| 10 /)
})
