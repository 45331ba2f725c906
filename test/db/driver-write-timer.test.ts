// postgres.js 3.4.x poisons a pooled connection whose socket closes while a small write waits
// for its setImmediate: closed() cancels the Immediate but leaves `nextWriteTimer` set, so the
// connection's next startup message is never flushed and every later query on it hangs until
// connect_timeout (scripts/patch-postgres.mjs, docs/decisions.md "postgres.js write-timer
// patch"). This drives the driver over a scripted socket, with no database: close the socket
// right after a query's write is buffered, then run a query on the same connection again.
import t from 'tap'
import { EventEmitter } from 'node:events'
import postgres from 'postgres'

/** A PostgreSQL server in miniature: trusts the startup, answers every simple Query with "SELECT 0". */
class ScriptedSocket extends EventEmitter {
  readyState = 'open'
  destroyed = false
  started = false
  writes = 0

  write (chunk: Buffer, fn?: () => void): boolean {
    this.writes++
    fn?.()
    const out: Buffer[] = []
    let buf = chunk
    if (!this.started) {
      // Startup (no type byte): AuthenticationOk, ReadyForQuery.
      this.started = true
      buf = buf.subarray(buf.readInt32BE(0))
      out.push(Buffer.from([0x52, 0, 0, 0, 8, 0, 0, 0, 0]), ready())
    }
    for (let i = 0; i + 5 <= buf.length; i += 1 + buf.readInt32BE(i + 1)) {
      if (buf[i] === 0x51) out.push(complete('SELECT 0'), ready()) // 'Q' -> CommandComplete, ReadyForQuery
    }
    if (out.length) setImmediate(() => { if (!this.destroyed) this.emit('data', Buffer.concat(out)) })
    return true
  }

  /** The peer went away: 'close' without an error, at once. */
  drop (): void {
    this.destroyed = true
    this.readyState = 'closed'
    this.emit('close', false)
  }

  destroy (): void { if (!this.destroyed) this.drop() }
  end (): void { this.destroy() }
  setKeepAlive (): void {}
}

function ready (): Buffer { return Buffer.from([0x5a, 0, 0, 0, 5, 0x49]) }
function complete (tag: string): Buffer {
  const s = Buffer.from(tag + '\0')
  const b = Buffer.alloc(5)
  b[0] = 0x43
  b.writeInt32BE(4 + s.length, 1)
  return Buffer.concat([b, s])
}

/** A one-connection pool over scripted sockets; `run` sends a simple query, and says how it ended. */
function scripted (t: { teardown: (fn: () => unknown) => void }) {
  const sockets: ScriptedSocket[] = []
  const sql = postgres({
    host: '127.0.0.1', port: 1, user: 'u', database: 'd', max: 1, fetch_types: false, idle_timeout: 0, connect_timeout: 3,
    socket: () => { const s = new ScriptedSocket(); sockets.push(s); return s },
  } as unknown as postgres.Options<Record<string, never>>)
  t.teardown(() => sql.end({ timeout: 0 }))
  const run = (text: string): Promise<string> => sql.unsafe(text, [], { simple: true } as never)
    .then(() => 'answered', (e: Error & { code?: string }) => e.code ?? e.message)
  return { sockets, run }
}

t.test('a connection whose socket closed with a write pending connects and answers again', async (t) => {
  const { sockets, run } = scripted(t)

  t.equal(await run('select 1'), 'answered')
  t.equal(sockets.length, 1)

  // The next query's bytes wait for a setImmediate; the socket closes before it runs.
  const second = run('select 2')
  for (let i = 0; i < 50 && sockets[0].writes < 3; i++) await Promise.resolve()
  t.equal(sockets[0].writes, 2, 'the query is buffered, not yet written')
  sockets[0].drop()
  t.equal(await second, 'CONNECTION_CLOSED', 'the query on the closed socket fails')

  // The same connection object reconnects: its startup must reach the new socket.
  const third = await run('select 3')
  t.equal(sockets.length, 2, 'a new socket')
  t.equal(third, 'answered', 'the query after the reconnect is answered (unpatched: CONNECT_TIMEOUT)')
  t.ok(sockets[1].writes >= 2, 'startup and query written to the new socket')
})

t.test('a query sent between the socket\'s error and its close fails instead of taking the next session\'s answer', async (t) => {
  const { sockets, run } = scripted(t)
  t.equal(await run('select 1'), 'answered')

  // A reset: 'error' first, 'close' (with hadError) a moment later; a query arrives in between.
  sockets[0].emit('error', Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }))
  const between = run('select 2')
  for (let i = 0; i < 50 && sockets[0].writes < 3; i++) await Promise.resolve()
  await new Promise<void>(resolve => setImmediate(resolve))
  sockets[0].destroyed = true
  sockets[0].emit('close', true)
  const after = await run('select 3')
  t.equal(after, 'answered', 'the next query is answered on a new socket')
  t.equal(await between, 'CONNECTION_CLOSED', 'the query sent on the dying socket fails (unpatched: resolved by the new session\'s startup)')
})
