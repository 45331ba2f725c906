// The webhook HTTP/1.1 client (src/net/h1-client.ts) against scripted receivers: answers
// framed by Content-Length, chunked or the close, split into single bytes; 1xx before the final
// answer; pipelining within the per-origin cap; requests resent once when a kept-alive socket
// closes under them; timeouts; protocol garbage; a refused connection.
import { readFileSync } from 'node:fs'
import { createServer as createHttpServer } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import { createServer, type Socket } from 'node:net'
import t from 'tap'
import { buildConnector } from 'undici'
import { guardedConnector } from '../../src/net/dns-guard.js'
import { Sender, type SendResult } from '../../src/webhooks/delivery-send.js'
import { HttpProtocolError, MAX_CONNECTIONS, Origin, PIPELINING, Post } from '../../src/net/h1-client.js'

interface Req { head: string; body: string; index: number; socket: Socket }

/** A raw TCP receiver: `answer` is called for each complete request (in order, per socket). */
async function rawServer (answer: (r: Req) => void): Promise<{ port: number; sockets: number; requests: Req[]; close: () => Promise<void> }> {
  const state = { port: 0, sockets: 0, requests: [] as Req[], close: async () => {} }
  const live = new Set<Socket>()
  const server = createServer((socket) => {
    state.sockets++
    live.add(socket)
    socket.on('close', () => live.delete(socket))
    socket.on('error', () => {})
    let buf = ''
    let index = 0
    socket.on('data', (chunk) => {
      buf += chunk.toString('latin1')
      for (;;) {
        const end = buf.indexOf('\r\n\r\n')
        if (end < 0) return
        const head = buf.slice(0, end)
        const len = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0)
        if (buf.length < end + 4 + len) return
        const r = { head, body: buf.slice(end + 4, end + 4 + len), index: index++, socket }
        buf = buf.slice(end + 4 + len)
        state.requests.push(r)
        answer(r)
      }
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  state.port = (server.address() as { port: number }).port
  state.close = () => new Promise<void>(resolve => { for (const s of live) s.destroy(); server.close(() => resolve()) })
  return state
}

const sender = (port: number, timeoutMs?: number) => new Sender(guardedConnector({ allowlist: [`127.0.0.1:${port}`], timeoutMs: 2000 }), [`127.0.0.1:${port}`], timeoutMs)

function post (s: Sender, port: number, path = '/hook', body = '{"n":1}'): Promise<SendResult> {
  const d = s.destination(`http://127.0.0.1:${port}${path}`)
  if ('error' in d) throw new Error(d.error)
  return new Promise(resolve => s.send(d, ['content-type', 'application/json', 'x-service-delivery', 'dlv_1'], body, resolve))
}

/** Writes `text` one byte per turn. */
function trickle (socket: Socket, text: string): void {
  let i = 0
  const next = (): void => { if (i < text.length && !socket.destroyed) { socket.write(text[i++]); setImmediate(next) } }
  next()
}

t.test('the request on the wire: request line, host, content-length, the given headers, the body', async (t) => {
  const srv = await rawServer(r => r.socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok'))
  t.teardown(srv.close)
  const s = sender(srv.port)
  t.teardown(() => s.close(new Error('done')))
  const body = '{"é":"ü"}'
  t.same(await post(s, srv.port, '/a/b?c=1%20d', body), { statusCode: 200, error: null })
  const lines = srv.requests[0].head.split('\r\n')
  t.equal(lines[0], 'POST /a/b?c=1%20d HTTP/1.1')
  t.ok(lines.includes(`host: 127.0.0.1:${srv.port}`))
  t.ok(lines.includes(`content-length: ${Buffer.byteLength(body)}`), 'the length in bytes, not characters')
  t.ok(lines.includes('x-service-delivery: dlv_1'))
  t.equal(Buffer.from(srv.requests[0].body, 'latin1').toString('utf8'), body)
})

t.test('many requests to one Node server: all answered, at most MAX_CONNECTIONS sockets, pipelined', async (t) => {
  let sockets = 0
  const srv = createHttpServer((req, res) => { req.resume(); req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok')) })
  srv.on('connection', () => { sockets++ })
  await new Promise<void>(resolve => srv.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => { srv.closeAllConnections(); srv.close(() => resolve()) }))
  const port = (srv.address() as { port: number }).port
  const s = sender(port)
  t.teardown(() => s.close(new Error('done')))
  const n = MAX_CONNECTIONS * PIPELINING * 3
  const results = await Promise.all(Array.from({ length: n }, () => post(s, port)))
  t.equal(results.filter(r => r.statusCode === 200).length, n, 'every answer a 200 (chunked bodies)')
  t.ok(sockets <= MAX_CONNECTIONS, `${sockets} sockets`)
  t.equal(s.inFlight, 0)
})

t.test('an Origin given its own socket cap and no pipelining: one request a socket, more sockets than MAX_CONNECTIONS', async (t) => {
  // The provider stubs send callbacks this way (test/fixtures/provider-stub.ts): as many
  // sockets as callbacks in flight, each carrying one at a time.
  const held: Req[] = []
  const srv = await rawServer(r => { held.push(r) })
  t.teardown(srv.close)
  const cap = MAX_CONNECTIONS + 8
  const o = new Origin(`http://127.0.0.1:${srv.port}`, buildConnector({}), cap)
  o.pipelining = 1
  t.teardown(() => { for (const c of [...o.conns]) c.destroy(new Error('done')) })
  const n = cap + 4
  const answers = Array.from({ length: n }, () => new Promise<SendResult>(resolve => o.send(new Post(`POST /cb HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n`, performance.now() + 10_000, resolve))))
  while (held.length < cap) await new Promise(resolve => setImmediate(resolve))
  t.equal(o.conns.length, cap, 'a socket for each request in flight, up to the cap')
  t.equal(o.queue.length, n - cap, 'the rest wait for a socket')
  t.ok(held.every(r => r.index === 0), 'one request on each socket')
  const answer = (r: Req) => r.socket.write('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n')
  for (const r of held) answer(r)
  while (held.length < n) await new Promise(resolve => setImmediate(resolve))
  for (const r of held.slice(cap)) answer(r)
  const results = await Promise.all(answers)
  t.equal(results.filter(r => r.statusCode === 200).length, n)
  t.equal(srv.sockets, cap, 'the waiting requests went on the sockets that answered')
})

t.test('answers split into single bytes: Content-Length, chunked with extensions and trailers, 1xx first', async (t) => {
  const answers = [
    'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello',
    'HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nboom\r\n6\r\n  went\r\n0\r\nx-trailer: 1\r\n\r\n',
    'HTTP/1.1 204 No Content\r\n\r\n',
    'HTTP/1.1 302 Found\r\nLocation: https://elsewhere.example/x\r\ncontent-length: 0\r\n\r\n',
  ]
  const srv = await rawServer(r => trickle(r.socket, answers[r.index]))
  t.teardown(srv.close)
  const s = sender(srv.port)
  t.teardown(() => s.close(new Error('done')))
  t.same(await post(s, srv.port), { statusCode: 200, error: null })
  t.same(await post(s, srv.port), { statusCode: 500, error: 'HTTP 500: boom went' })
  t.same(await post(s, srv.port), { statusCode: 204, error: null })
  t.same(await post(s, srv.port), { statusCode: 302, error: 'HTTP 302: redirect to https://elsewhere.example/x not followed' })
  t.equal(srv.sockets, 1, 'one kept-alive socket for all four')
})

t.test('a body framed by the close: its snippet is kept, the socket is not reused', async (t) => {
  const srv = await rawServer(r => { r.socket.write('HTTP/1.1 503 Busy\r\n\r\ntry   later'); setImmediate(() => r.socket.end()) })
  t.teardown(srv.close)
  const s = sender(srv.port)
  t.teardown(() => s.close(new Error('done')))
  t.same(await post(s, srv.port), { statusCode: 503, error: 'HTTP 503: try later' })
  t.same(await post(s, srv.port), { statusCode: 503, error: 'HTTP 503: try later' })
  t.equal(srv.sockets, 2)
})

t.test('a receiver that closes after every answer: one request per socket, nothing written behind a closing answer', async (t) => {
  let answered = 0
  const srv = await rawServer(r => {
    if (r.index > 0) return // would be read (and maybe acted on) but never answered
    answered++
    r.socket.end('HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n')
  })
  t.teardown(srv.close)
  const s = sender(srv.port)
  t.teardown(() => s.close(new Error('done')))
  const n = MAX_CONNECTIONS * PIPELINING
  const results = await Promise.all(Array.from({ length: n }, () => post(s, srv.port)))
  t.equal(results.filter(r => r.statusCode === 200).length, n, 'all delivered')
  t.equal(answered, n, 'each answered once')
  t.equal(srv.requests.length, n, 'no request was written behind another on a socket not yet known to stay open')
})

t.test('a kept-alive socket the receiver closed while idle: the next request goes out again on a new one', async (t) => {
  const srv = await rawServer(r => {
    // The receiver's keep-alive timeout racing the client's third request: a reset, no answer.
    if (r.index === 2) { r.socket.resetAndDestroy(); return }
    r.socket.write('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n')
  })
  t.teardown(srv.close)
  const s = sender(srv.port)
  t.teardown(() => s.close(new Error('done')))
  t.same(await post(s, srv.port), { statusCode: 200, error: null })
  t.same(await post(s, srv.port), { statusCode: 200, error: null })
  t.same(await post(s, srv.port), { statusCode: 200, error: null }, 'the request that found the socket reset is sent once more')
  t.equal(srv.requests.length, 4, 'three requests, one of them sent twice')
  t.equal(srv.sockets, 2)
})

t.test('a request that never gets an answer times out; the one behind it on the socket is sent again', async (t) => {
  const hung = new Set<Socket>()
  const srv = await rawServer(r => {
    // In order, as any HTTP/1.1 server: nothing after a request that is never answered.
    if (r.head.includes('/hang')) hung.add(r.socket)
    if (hung.has(r.socket)) return
    r.socket.write('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n')
  })
  t.teardown(srv.close)
  const s = sender(srv.port, 1000)
  t.teardown(() => s.close(new Error('done')))
  const until = async (ok: () => boolean) => { while (!ok()) await new Promise(resolve => setTimeout(resolve, 5)) }
  // Sockets that answered and stayed open (only those take pipelined requests).
  await Promise.all(Array.from({ length: MAX_CONNECTIONS }, () => post(s, srv.port, '/ok')))
  const warm = srv.requests.length
  // Every socket holds a hanging request; half the timeout later one more is pipelined behind one.
  const hang = Array.from({ length: MAX_CONNECTIONS }, () => post(s, srv.port, '/hang'))
  // Taken after the posts: each deadline (its creation + 1000 ms) is then before t0 + 1000, so the
  // sweep below finds them all past it. Taken before, a loaded machine spread the 16 creations over
  // more than the poll's overshoot, the sweep missed the later ones, and nothing swept again.
  const t0 = performance.now()
  await until(() => performance.now() > t0 + 500)
  const behind = post(s, srv.port, '/ok')
  await until(() => srv.requests.length === warm + MAX_CONNECTIONS + 1)
  // The sweep (the delivery loop runs it every second) once the hanging ones are past their deadline only.
  await until(() => performance.now() > t0 + 1000)
  s.sweep()
  const results = await Promise.all(hang)
  t.ok(results.every(r => r.statusCode === null && (r.cause as Error).name === 'TimeoutError'), 'the hanging ones time out')
  t.same(await behind, { statusCode: 200, error: null }, 'the one behind was sent again on a new socket and answered')
  t.equal(s.inFlight, 0)
})

t.test('bytes that are not HTTP, and a refused connection, fail the request with a cause', async (t) => {
  const srv = await rawServer(r => r.socket.write('SSH-2.0-OpenSSH\r\n\r\n'))
  t.teardown(srv.close)
  const s = sender(srv.port)
  t.teardown(() => s.close(new Error('done')))
  const r = await post(s, srv.port)
  t.equal(r.statusCode, null)
  t.ok(r.cause instanceof HttpProtocolError, String(r.cause))
  const bad = await rawServer(r => r.socket.write('HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n'))
  t.teardown(bad.close)
  const s2 = sender(bad.port)
  t.teardown(() => s2.close(new Error('done')))
  t.ok((await post(s2, bad.port)).cause instanceof HttpProtocolError, 'a bad Content-Length')
  const gone = await rawServer(() => {})
  const port = gone.port
  await gone.close()
  const s3 = sender(port)
  const refused = await post(s3, port)
  t.equal(refused.statusCode, null)
  t.equal((refused.cause as { code?: string }).code, 'ECONNREFUSED')
  t.equal(s3.inFlight, 0)
})

t.test('close() ends every request in flight with its reason and closes the sockets', async (t) => {
  const srv = await rawServer(() => {})
  t.teardown(srv.close)
  const s = sender(srv.port)
  const p = [post(s, srv.port), post(s, srv.port)]
  while (srv.requests.length < 2) await new Promise(resolve => setImmediate(resolve))
  s.close(new Error('stopping'))
  for (const r of await Promise.all(p)) t.equal((r.cause as Error).message, 'stopping')
  t.equal(s.inFlight, 0)
})

t.test('over TLS: the same client on the socket the connector opened (a test CA; production uses the system store)', async (t) => {
  const dir = new URL('../../../test/fixtures/tls/', import.meta.url)
  const cert = readFileSync(new URL('cert.pem', dir))
  const srv = createHttpsServer({ key: readFileSync(new URL('key.pem', dir)), cert }, (req, res) => {
    let n = 0
    req.on('data', (c: Buffer) => { n += c.length })
    req.on('end', () => res.writeHead(n > 0 ? 201 : 400, { 'content-type': 'text/plain' }).end('ok'))
  })
  await new Promise<void>(resolve => srv.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => { srv.closeAllConnections(); srv.close(() => resolve()) }))
  const port = (srv.address() as { port: number }).port
  const s = new Sender(buildConnector({ ca: cert, timeout: 2000 }), [`127.0.0.1:${port}`])
  t.teardown(() => s.close(new Error('done')))
  const d = s.destination(`https://127.0.0.1:${port}/hook`)
  if ('error' in d) throw new Error(d.error)
  const send = () => new Promise<SendResult>(resolve => s.send(d, ['content-type', 'application/json'], '{"tls":true}', resolve))
  const results = await Promise.all(Array.from({ length: 20 }, send))
  t.ok(results.every(r => r.statusCode === 201), JSON.stringify(results[0]))
  const untrusted = new Sender(buildConnector({ timeout: 2000 }), [`127.0.0.1:${port}`])
  const r = await new Promise<SendResult>(resolve => untrusted.send(d, [], '{}', resolve))
  t.equal(r.statusCode, null, 'a certificate the store does not trust: no request')
  t.match(String((r.cause as { code?: string }).code), /SELF_SIGNED|UNABLE_TO_VERIFY|DEPTH_ZERO/)
})

t.test('Keep-Alive: timeout=N from the receiver: an idle socket is given up a second before it', async (t) => {
  const srv = await rawServer(r => r.socket.write('HTTP/1.1 200 OK\r\nKeep-Alive: timeout=1\r\ncontent-length: 0\r\n\r\n'))
  t.teardown(srv.close)
  const s = sender(srv.port)
  t.teardown(() => s.close(new Error('done')))
  t.same(await post(s, srv.port), { statusCode: 200, error: null })
  s.sweep() // idle for less than a millisecond, past timeout=1 less a second
  t.same(await post(s, srv.port), { statusCode: 200, error: null })
  t.equal(srv.sockets, 2, 'the idle socket was closed by the sweep, the next request opened another')
})
