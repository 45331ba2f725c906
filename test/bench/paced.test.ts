// `--paced`'s load generator (bench/lib/http-paced.c driven by bench/lib/paced.ts): it sends
// exactly rate x duration requests, cycling the list with each request's headers, reads
// answers split over several reads, counts non-2xx answers, and counts a connection the
// server drops as an error instead of hanging.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { paced, pacedClient } from '../../bench/lib/paced.js'

async function server (handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; close: () => Promise<void> }> {
  const s = createServer(handle)
  await new Promise<void>(resolve => s.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`,
    close: () => new Promise<void>(resolve => { s.closeAllConnections(); s.close(() => resolve()) }),
  }
}

const skip = pacedClient() === null ? 'no C compiler here' : false

t.test('sends rate x duration requests, cycling the list with its headers', { skip }, async (t) => {
  const seen: Array<{ path: string; key: string | undefined }> = []
  const s = await server((req, res) => {
    seen.push({ path: req.url!, key: req.headers['x-api-key'] as string | undefined })
    if (req.url === '/c') { res.statusCode = 404; res.end('{"error":"no"}'); return }
    // The answer in two writes (head and part of the body, then the rest): two reads at the client.
    res.setHeader('content-length', 2000)
    res.write('x'.repeat(1000))
    setImmediate(() => res.end('y'.repeat(1000)))
  })
  t.teardown(s.close)
  const r = await paced({
    url: s.url,
    connections: 4,
    rate: 300,
    duration: 1,
    requests: [{ path: '/a', headers: { 'x-api-key': 'k1' } }, { path: '/b', headers: { 'x-api-key': 'k2' } }, { path: '/c' }],
  })
  t.equal(r.requests, 300)
  t.equal(r.answered, 300)
  t.equal(r.errors, 0)
  t.equal(r.non2xx, 100, 'every third request answered 404')
  t.equal(seen.length, 300)
  // The list is cycled with each entry's own headers. Counted over the whole run: on four
  // connections under load the server may take any request before an earlier one.
  t.equal(seen.filter(x => x.path === '/a' && x.key === 'k1').length, 100)
  t.equal(seen.filter(x => x.path === '/b' && x.key === 'k2').length, 100)
  t.equal(seen.filter(x => x.path === '/c' && x.key === undefined).length, 100)
  t.ok(r.p50_us > 0 && r.p99_us >= r.p50_us && r.max_us >= r.p99_us)
  t.ok(r.seconds >= 0.99, `the run spans the duration (${r.seconds} s)`)
})

t.test('a server that drops every connection: errors, and the run ends', { skip }, async (t) => {
  const s = await server((req) => { req.socket.destroy() })
  t.teardown(s.close)
  const r = await paced({ url: s.url, connections: 3, rate: 100, duration: 1 })
  t.equal(r.answered, 0)
  t.equal(r.errors, 3, 'one error per connection lost; then no connection is left')
})

t.test('only bodiless GETs', { skip }, async (t) => {
  await t.rejects(paced({ url: 'http://127.0.0.1:1', connections: 1, rate: 1, duration: 1, requests: [{ method: 'POST', path: '/' }] }), /GET requests without a body/)
})

t.test('PACED_TRACE: the slow answers with their due times, on the monotonic clock', { skip }, async (t) => {
  const s = await server((req, res) => {
    // Every /slow answer leaves 60 ms after it came (a timer may fire a ms early against the
    // monotonic clock: its start is the loop's cached time), so over 50 ms late against its due time.
    if (req.url === '/slow') { setTimeout(() => res.end('slow'), 60); return }
    res.end('ok')
  })
  t.teardown(s.close)
  const dir = mkdtempSync(join(tmpdir(), 'paced-trace-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const file = join(dir, 'slow.txt')
  process.env.PACED_TRACE = file
  process.env.PACED_TRACE_US = '20000'
  t.teardown(() => { delete process.env.PACED_TRACE; delete process.env.PACED_TRACE_US })
  const before = process.hrtime.bigint()
  const r = await paced({ url: s.url, connections: 8, rate: 200, duration: 1, requests: [{ path: '/slow' }, ...Array.from({ length: 9 }, () => ({ path: '/fast' }))] })
  const after = process.hrtime.bigint()
  t.equal(r.answered, 200)
  const lines = readFileSync(file, 'utf8').trim().split('\n').map(l => l.split(' ').map(BigInt))
  t.ok(lines.every(([, lat]) => lat > 20_000_000n), 'only answers over PACED_TRACE_US')
  const slow = lines.filter(([, lat]) => lat > 50_000_000n).length
  t.ok(slow >= 20, `every /slow answer (one in ten) is there (${slow} of ${lines.length} lines)`)
  t.ok(lines.every(([due]) => due >= before && due <= after), 'due times on the clock of process.hrtime (CLOCK_MONOTONIC)')
})
