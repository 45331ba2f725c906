// The JSON client of provider calls (src/net/json-client.ts) against a local server: any status
// comes back with flattened headers and parsed JSON; an oversized answer is AnswerTooLarge; no
// answer in time, an abort or a refused connection is NoAnswer saying why.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { buildConnector } from 'undici'
import { Client } from '../../src/net/h1-client.js'
import { AnswerTooLarge, NoAnswer, requestJson } from '../../src/net/json-client.js'

const perSocket = new WeakMap<object, number>()
let posts = 0
const server = createServer((req, res) => {
  const nth = (perSocket.get(req.socket) ?? 0) + 1
  perSocket.set(req.socket, nth)
  let body = ''
  req.on('data', (c: Buffer) => { body += c.toString() })
  req.on('end', () => {
    if (req.url === '/echo') {
      res.setHeader('X-Many', ['a', 'b'])
      res.writeHead(422, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ method: req.method, type: req.headers['content-type'], accept: req.headers.accept, got: JSON.parse(body) }))
    } else if (req.url === '/text') res.end('not json')
    else if (req.url === '/big') res.end('x'.repeat(5000))
    else if (req.url === '/hang') { /* never answers */ }
    else if (req.url === '/second-dropped') {
      if (req.method === 'POST') posts++
      if (nth === 2) req.socket.destroy() // the kept-alive socket closes as the request arrives
      else res.end('{"ok":true}')
    } else if (req.url === '/cut') { res.writeHead(200, { 'content-length': '100' }); res.write('{"partial":'); setImmediate(() => req.socket.destroy()) }
  })
})
await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
t.teardown(() => { server.closeAllConnections(); server.close() })

t.test('any status, headers lower-cased and joined, the body parsed', async t => {
  const r = await requestJson('POST', `${base}/echo`, { json: { a: 1 }, timeoutMs: 2000, maxBytes: 4096 })
  t.equal(r.status, 422)
  t.equal(r.headers['x-many'], 'a, b')
  t.same(r.json, { method: 'POST', type: 'application/json', accept: 'application/json', got: { a: 1 } })
  t.equal(r.text, JSON.stringify(r.json))
  const plain = await requestJson('GET', `${base}/text`, { timeoutMs: 2000, maxBytes: 4096 })
  t.same([plain.status, plain.json, plain.text], [200, null, 'not json'], 'a body that is not JSON: json is null')
})

t.test('an answer over the cap is AnswerTooLarge with its status', async t => {
  const e = await requestJson('GET', `${base}/big`, { timeoutMs: 2000, maxBytes: 1000 }).catch((x: unknown) => x)
  t.type(e, AnswerTooLarge)
  t.same([(e as AnswerTooLarge).status, (e as AnswerTooLarge).message], [200, 'answer larger than 1000 bytes'])
})

t.test('no answer: timeout, the caller\'s abort, a refused connection', async t => {
  const slow = await requestJson('GET', `${base}/hang`, { timeoutMs: 100, maxBytes: 1000 }).catch((x: unknown) => x)
  t.type(slow, NoAnswer)
  t.equal((slow as Error).message, 'no answer within 100 ms')
  const ac = new AbortController()
  const aborted = requestJson('GET', `${base}/hang`, { timeoutMs: 5000, maxBytes: 1000, signal: ac.signal }).catch((x: unknown) => x)
  ac.abort()
  t.equal(((await aborted) as Error).message, 'aborted')
  const closed = createServer()
  await new Promise<void>(resolve => closed.listen(0, '127.0.0.1', resolve))
  const port = (closed.address() as AddressInfo).port
  await new Promise<void>(resolve => closed.close(() => resolve()))
  const refused = await requestJson('GET', `http://127.0.0.1:${port}/`, { timeoutMs: 2000, maxBytes: 1000 }).catch((x: unknown) => x)
  t.type(refused, NoAnswer)
  t.match((refused as Error).message, /ECONNREFUSED|connect/)
})

t.test('a request still waiting for a socket ends at its deadline too; the others are unaffected', async t => {
  const one = new Client(buildConnector({}), { maxConnections: 1 })
  t.teardown(() => one.close(new Error('test over')))
  const hung = requestJson('GET', `${base}/hang`, { timeoutMs: 3000, maxBytes: 1000, client: one }).catch((x: unknown) => x)
  const queued = await requestJson('GET', `${base}/text`, { timeoutMs: 100, maxBytes: 1000, client: one }).catch((x: unknown) => x)
  t.type(queued, NoAnswer)
  t.equal((queued as Error).message, 'no answer within 100 ms', 'queued behind a request that never answers')
  t.equal(((await hung) as Error).message, 'no answer within 3000 ms', 'the first ends at its own deadline')
  const after = await requestJson('GET', `${base}/text`, { timeoutMs: 2000, maxBytes: 1000, client: one })
  t.equal(after.text, 'not json', 'the socket is free again')
})

t.test('a kept-alive socket closing unanswered: a GET is sent again, a POST is not (it may have been acted on)', async t => {
  const one = new Client(buildConnector({}), { maxConnections: 1 })
  t.teardown(() => one.close(new Error('test over')))
  t.equal((await requestJson('GET', `${base}/second-dropped`, { timeoutMs: 2000, maxBytes: 1000, client: one })).text, '{"ok":true}')
  const again = await requestJson('GET', `${base}/second-dropped`, { timeoutMs: 2000, maxBytes: 1000, client: one })
  t.same(again.json, { ok: true }, 'the GET answered on a new socket')
  posts = 0
  const post = await requestJson('POST', `${base}/second-dropped`, { json: { a: 1 }, timeoutMs: 2000, maxBytes: 1000, client: one }).catch((x: unknown) => x)
  t.type(post, NoAnswer, 'the POST fails: the caller decides (an upstream lookup for a submit)')
  t.equal(posts, 1, 'the receiver saw it once')
})

t.test('an answer cut short after its status is NoAnswer, not a partial body', async t => {
  const e = await requestJson('GET', `${base}/cut`, { timeoutMs: 2000, maxBytes: 1000 }).catch((x: unknown) => x)
  t.type(e, NoAnswer)
  t.match((e as Error).message, /cut short/)
})

t.test('a header value with a line break is refused before anything is sent', async t => {
  const e = await requestJson('GET', `${base}/text`, { headers: { authorization: 'Key a\r\nx-evil: 1' }, timeoutMs: 2000, maxBytes: 1000 }).catch((x: unknown) => x)
  t.type(e, NoAnswer)
  t.match((e as Error).message, /line break/)
})
