// Graceful stop: close() drains requests in flight, refuses new ones, and is
// not held up by clients that went away half-way through sending a body.
import t from 'tap'
import { connect } from 'node:net'
import { createUser, startServer } from '../helpers/server.js'
import { waitForEvent } from '../helpers/wait.js'

t.test('a client that disconnects mid-body does not hold up close()', async (t) => {
  const s = await startServer(t)
  for (const path of ['/v1/auth/login', '/v1/auth/signup', '/v1/admin/accounts']) {
    const sock = connect(s.app.port, '127.0.0.1')
    await waitForEvent(sock, 'connect', { what: `a connection for ${path}` })
    await new Promise(resolve => sock.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"email":`, resolve))
    // The server's event loop has read those bytes once it answers a request sent after them.
    t.equal((await s.req('GET', '/v1/health')).status, 200, `${path}: half a body is in the server`)
    sock.destroy()
  }
  t.equal((await s.req('GET', '/v1/health')).status, 200, 'the server is fine')
  const started = Date.now()
  await s.app.close()
  const took = Date.now() - started
  t.ok(took < 8000, `close() took ${took} ms (a stuck body read would hold it for its 10 s timeout)`)
})

t.test('close() lets a request in flight finish and answers new ones 503 or refuses them', async (t) => {
  const s = await startServer(t)
  const u = await createUser(s, { withKey: false })
  // The login is held inside its password check (the handler is running) until close() has
  // begun: no guess at how long the request takes to arrive on a loaded machine.
  const passwords = s.app.services.passwords
  const verify = passwords.verify.bind(passwords)
  let entered!: () => void
  const inHandler = new Promise<void>(resolve => { entered = resolve })
  let release!: () => void
  const released = new Promise<void>(resolve => { release = resolve })
  passwords.verify = async (pw, hash) => { entered(); await released; return verify(pw, hash) }
  const inflight = s.req('POST', '/v1/auth/login', { body: { email: u.email, password: u.password } })
  await inHandler
  const closing = s.app.close()
  release()
  const r = await inflight
  t.equal(r.status, 200, 'the request in flight completed')
  t.type(r.body.token, 'string')
  await closing
  const after = await s.req('GET', '/v1/health').then(x => x.status, (e: Error) => e.name)
  t.not(after, 200, `after close: ${after}`)
})
