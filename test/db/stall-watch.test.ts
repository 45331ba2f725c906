// The connection watchdog (src/db/connect.ts, docs/decisions.md "Database outage"): a socket that
// owes an answer and receives nothing for stallMs is cut; an event loop that was blocked while
// the answer arrived is not a stall.
import t from 'tap'
import { connect } from '../../src/db/connect.js'

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'

t.test('an answer that arrived while the event loop was blocked past stallMs is read, not cut', async (t) => {
  const sql = connect(url, { max: 1, stallMs: 200 })
  t.teardown(() => sql.end({ timeout: 1 }))
  await sql`SELECT 1`
  const pending = sql<Array<{ n: number }>>`SELECT 2 AS n, pg_sleep(0.05)`.execute()
  await new Promise(resolve => setImmediate(resolve)) // sent: the watchdog is armed; the answer comes 50 ms later
  // time: the block itself is what is tested (a synchronous task, a long GC pause): 3x stallMs.
  const until = Date.now() + 600
  while (Date.now() < until) { /* busy */ }
  const rows = await pending
  t.equal(rows[0].n, 2)
})

t.test('a query that gets no byte for stallMs is still cut as DB_STALLED', async (t) => {
  const sql = connect(url, { max: 1, stallMs: 200 })
  t.teardown(() => sql.end({ timeout: 1 }))
  const err = await sql`SELECT pg_sleep(2)`.catch((e: Error & { code?: string }) => e)
  t.equal((err as { code?: string }).code, 'DB_STALLED')
})
