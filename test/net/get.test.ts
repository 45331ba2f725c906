// One GET of a file (src/net/get.ts) against a local server: a small declared body is collected
// whole, a large or undeclared one streamed, any other status's body discarded; the per-chunk
// check ends a collected body; a refused connection rejects.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { buildConnector } from 'undici'
import { Client } from '../../src/net/h1-client.js'
import { get, type GetOptions } from '../../src/net/get.js'

const big = Buffer.alloc(300_000, 7)
const server = createServer((req, res) => {
  if (req.url === '/small') res.writeHead(200, { 'content-length': '5' }).end('hello')
  else if (req.url === '/big') res.writeHead(200, { 'content-length': String(big.length) }).end(big)
  else if (req.url === '/chunked') { res.writeHead(200); res.write('a'); res.end('b') }
  else if (req.url === '/moved') res.writeHead(302, { location: '/small', 'content-length': '4' }).end('gone')
  else res.writeHead(404).end('no')
})
await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
const client = new Client(buildConnector({}), { maxConnections: 4 })
t.teardown(() => { client.close(new Error('test over')); server.close() })
const opts = (o: Partial<GetOptions> = {}): GetOptions => ({
  client, headersTimeout: 5000, bodyTimeout: 5000, bufferMax: 1000, check: () => null, ...o,
})

async function readAll (s: NodeJS.ReadableStream): Promise<Buffer> {
  const parts: Buffer[] = []
  for await (const c of s) parts.push(c as Buffer)
  return Buffer.concat(parts)
}

t.test('a declared body within bufferMax is collected whole; a larger or undeclared one is a stream', async t => {
  const small = await get(new URL(`${base}/small`), opts())
  t.same([small.status, small.declared, small.stream], [200, 5, null])
  t.equal((await small.whole!).toString(), 'hello')
  const large = await get(new URL(`${base}/big`), opts())
  t.equal(large.whole, null)
  t.same(await readAll(large.stream!), big, 'streamed whole, with backpressure')
  const chunked = await get(new URL(`${base}/chunked`), opts())
  t.ok(Number.isNaN(chunked.declared), 'no declared length')
  t.equal((await readAll(chunked.stream!)).toString(), 'ab')
})

t.test('a streamed body read slowly pauses the socket, which then serves the next request', async t => {
  const slow = await get(new URL(`${base}/big`), opts())
  const parts: Buffer[] = []
  for await (const c of slow.stream!) {
    parts.push(c as Buffer)
    await new Promise(resolve => setImmediate(resolve)) // a reader slower than loopback
  }
  t.same(Buffer.concat(parts), big, 'every byte, in order')
  t.equal((await (await get(new URL(`${base}/small`), opts())).whole!).toString(), 'hello', 'the socket reads again')
})

t.test('another status: headers only, the body read into nothing, the socket reused', async t => {
  const moved = await get(new URL(`${base}/moved`), opts())
  t.same([moved.status, moved.headers.location, moved.whole, moved.stream], [302, '/small', null, null])
  const missing = await get(new URL(`${base}/nope`), opts())
  t.equal(missing.status, 404)
  t.equal((await (await get(new URL(`${base}/small`), opts())).whole!).toString(), 'hello', 'next request fine')
})

t.test('the check ends a collected body with its error; a refused connection rejects', async t => {
  const r = await get(new URL(`${base}/small`), opts({ check: (size, declared) => size >= 3 ? new Error(`stop at ${size} of ${declared}`) : null }))
  await t.rejects(r.whole!, /stop at 5 of 5/)
  const closed = createServer()
  await new Promise<void>(resolve => closed.listen(0, '127.0.0.1', resolve))
  const port = (closed.address() as AddressInfo).port
  await new Promise<void>(resolve => closed.close(() => resolve()))
  await t.rejects(get(new URL(`http://127.0.0.1:${port}/`), opts()), /ECONNREFUSED|connect/)
})
