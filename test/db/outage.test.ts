// A PostgreSQL outage is an expected event: while the database is cut off or
// black-holed behind a TCP proxy, no shard worker restarts, every error is a 5xx envelope with
// Retry-After, each client wait is bounded, creation answers nothing it did not commit, and
// everything resumes by itself within 5 s of the database coming back.
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { ADMIN_DATABASE_URL, freshDatabase } from '../helpers/db.js'
import { startServer, type TestServer, type TestUser } from '../helpers/server.js'
import { dbOf, FAST_ENV, image, paidUser } from '../helpers/jobs.js'
import { sleep, waitFor } from '../helpers/wait.js'
import { TcpProxy } from '../fixtures/tcp-proxy.js'

const pgUrl = new URL(ADMIN_DATABASE_URL)
const proxy = new TcpProxy(Number(pgUrl.port || 5432), pgUrl.hostname)
await proxy.start()
t.teardown(() => proxy.stop())
const db = await freshDatabase(t)
const s = await startServer(t, { ...FAST_ENV, DATABASE_URL: proxy.rewrite(db), SHARDS: '2', DB_STALL_TIMEOUT_MS: '1500' })
const users: TestUser[] = []
for (let i = 0; i < 4; i++) users.push(await paidUser(s, 100_000))

interface Sample { at: number; status: number; ms: number; retryAfter: string | null; code?: string; jobId?: string; key: string }

/** Mixed traffic from `users` until `stop()`: creations with Idempotency-Key, balance reads. */
function load (srv: TestServer) {
  let running = true
  const samples: Sample[] = []
  const loops = users.map(async (u, i) => {
    let key = randomUUID()
    while (running) {
      const started = Date.now()
      const creating = i % 2 === 0 || Math.random() < 0.5
      let r
      try {
        r = creating
          ? await srv.req('POST', '/v1/generate/image', { key: u.key, headers: { 'idempotency-key': key }, body: image('a lighthouse') })
          : await srv.req('GET', '/v1/credits', { key: u.key })
      } catch (err) {
        samples.push({ at: started, status: 0, ms: Date.now() - started, retryAfter: null, code: String(err), key })
        continue
      }
      samples.push({ at: started, status: r.status, ms: Date.now() - started, retryAfter: r.headers.get('retry-after'), code: (creating ? 'POST ' : 'GET ') + (r.body?.code ?? ''), jobId: r.body?.id, key })
      if (creating && r.status < 500) key = randomUUID() // a 5xx is retried with the same key
      if (r.status >= 500) await sleep(50) // time: a client backing off after a 5xx, as real ones do
    }
  })
  return { samples, stop: async () => { running = false; await Promise.all(loops) } }
}

async function outage (t: any, kind: 'cut' | 'blackhole' | 'blackhole-cut', ms: number) {
  const restartsBefore = s.app.services.shards.restarts
  const l = load(s)
  // Five creations before each outage: the ledger check after the three outages has jobs of its own to look at.
  await waitFor(() => l.samples.filter(x => x.status === 201).length >= 5, { what: 'the load to have five jobs created before the outage' })
  if (kind === 'cut') await proxy.stop(); else proxy.blackhole()
  const downAt = Date.now()
  await sleep(ms) // time: the length of the outage is the scenario under test
  if (kind === 'blackhole-cut') { proxy.pass(); await proxy.stop(); await sleep(ms); await proxy.start() } // (and of its second phase)
  if (kind === 'cut') await proxy.start(); else if (kind === 'blackhole') proxy.pass()
  const upAt = Date.now()
  // Recovery: the first creation answered 201 after the database came back.
  const recoveredAt = await waitFor(() => { const ok = l.samples.find(x => x.status === 201 && x.at >= upAt); return ok && ok.at + ok.ms },
    { what: `${kind}: a creation answered 201 after the database returned`, timeoutMs: 15_000, everyMs: 20 }).catch(() => 0)
  await l.stop()
  // Requests started while the database was away (answered during or after).
  const during = l.samples.filter(x => x.at + x.ms >= downAt && x.at < upAt)

  const errors = during.filter(x => x.status >= 500 || x.status === 0)
  t.ok(errors.length > 0, `${kind}: the outage was felt (${errors.length} errors of ${during.length} answers)`)
  t.same(errors.filter(x => x.status === 0).map(x => x.code), [], `${kind}: no connection failed or hung up`)
  t.same(errors.filter(x => ![500, 503].includes(x.status)).map(x => `${x.status} ${x.code}`), [], `${kind}: errors are 500 or 503`)
  t.same(errors.filter(x => x.retryAfter === null).map(x => `${x.status} ${x.code}`), [], `${kind}: every error carries Retry-After`)
  const waits = during.map(x => x.ms).sort((a, b) => a - b)
  const worst = waits.at(-1) ?? 0
  for (const x of during.filter(x => x.ms > 2000)) t.comment(`slow: ${x.status} ${x.code ?? ''} ${x.ms} ms at +${x.at - downAt} ms`)
  t.ok(worst <= 5000, `${kind}: the longest request started during the outage took ${worst} ms (<= 5000)`)
  t.equal(s.app.services.shards.restarts - restartsBefore, 0, `${kind}: no shard worker restarted`)
  t.ok(recoveredAt > 0 && recoveredAt - upAt <= 5000, `${kind}: creations succeed again ${recoveredAt - upAt} ms after the database returned (<= 5000)`)
  t.comment(`${kind} ${ms} ms (started ${downAt}): ${during.length} answers during, ${errors.length} errors, worst wait ${worst} ms, recovery ${recoveredAt - upAt} ms`)
  return l.samples
}

const acked: Sample[] = []
t.test('database cut off (connections closed, port refused): contained, bounded, recovered', async (t) => {
  acked.push(...(await outage(t, 'cut', 2500)).filter(x => x.status === 201))
})

t.test('database black-holed (no packet answered): contained, bounded, recovered', async (t) => {
  acked.push(...(await outage(t, 'blackhole', 3500)).filter(x => x.status === 201))
})

t.test('database black-holed, then cut off: contained, bounded, recovered', async (t) => {
  acked.push(...(await outage(t, 'blackhole-cut', 2000)).filter(x => x.status === 201))
})

t.test('no acknowledged job is lost; balances equal their ledgers', async (t) => {
  const sql = dbOf(t, { databaseUrl: db })
  const ids = acked.map(x => x.jobId!)
  t.ok(ids.length > 10, `${ids.length} jobs acknowledged with 201`)
  const [{ n }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE id = ANY(${ids})`
  t.equal(n, new Set(ids).size, 'every 201 has its job row')
  const bad = await sql`SELECT a.id FROM accounts a LEFT JOIN (SELECT account_id, sum(delta) AS s FROM credit_entries GROUP BY account_id) e ON e.account_id = a.id WHERE a.credits <> coalesce(e.s, 0)`
  t.same(bad, [], 'credits = sum(entries) for every account')
  const twice = await sql`SELECT job_id FROM credit_entries WHERE job_id IS NOT NULL GROUP BY job_id, kind HAVING count(*) > 1`
  t.same(twice, [], 'no job charged or refunded twice')
})
