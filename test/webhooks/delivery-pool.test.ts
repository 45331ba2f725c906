// The webhook delivery pool under a deep backlog: a second worker is started while
// claims fill their limit and stopped once the backlog is gone; every delivery is sent exactly
// once (workers claim with a lease and SKIP LOCKED); attempts are recorded in multi-row
// statements (recordAttempts) with the same effect per row as recordAttempt; rows handed over
// in memory are sent without a claim, and what a worker cannot hold is released and claimed.
import { randomBytes } from 'node:crypto'
import { createServer } from 'node:http'
import postgres from 'postgres'
import t from 'tap'
import { DeliveryPool } from '../../src/webhooks/delivery-pool.js'
import { recordAttempt, recordAttempts, type AttemptRecord, type ClaimedDelivery } from '../../src/db/webhooks.js'
import { startReceiver } from '../fixtures/webhook-receiver.js'
import { FAST_ENV, image, paidUser } from '../helpers/jobs.js'
import { startServer } from '../helpers/server.js'

const rx = await startReceiver()
t.teardown(() => rx.close())
const s = await startServer(t, { ...FAST_ENV, WEBHOOK_ALLOWLIST: `127.0.0.1:${rx.port}` })
const u = await paidUser(s, 1000)
const job = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
// The rows below are this test's; the app's own pool must not take them.
await s.app.close()
const sql = postgres(s.databaseUrl, { max: 4 })
t.teardown(() => sql.end({ timeout: 5 }))

async function enqueue (n: number, path: string, secret: string, webhookId: number | null = null): Promise<string[]> {
  return enqueueTo(n, rx.url(path), secret, webhookId)
}

async function enqueueTo (n: number, url: string, secret: string, webhookId: number | null = null): Promise<string[]> {
  const rows = Array.from({ length: n }, (_, i) => ({
    id: `dlv_${randomBytes(12).toString('base64url')}`,
    event_id: `evt_t${i}`,
    account_id: u.id,
    webhook_id: webhookId,
    job_id: job.body.id,
    event: 'job.completed',
    url,
    secret,
    body: JSON.stringify({ id: `evt_t${i}`, type: 'job.completed', data: { n: i } }),
  }))
  for (let i = 0; i < rows.length; i += 1000) {
    const chunk = rows.slice(i, i + 1000)
    await sql`INSERT INTO webhook_deliveries ${sql(chunk as any, 'id', 'event_id', 'account_id', 'webhook_id', 'job_id', 'event', 'url', 'secret', 'body')}`
  }
  return rows.map(r => r.id)
}

t.test('a deep backlog gets a second worker; every delivery arrives exactly once; the extra worker is retired', async (t) => {
  const N = 3000
  const path = '/backlog'
  const secret = 'backlog-secret-0123456789'
  rx.route(path, secret)
  const ids = await enqueue(N, path, secret)
  const pool = new DeliveryPool({ databaseUrl: s.databaseUrl, config: s.config, version: 'test', maxWorkers: 2, idleRetireMs: 300 })
  t.teardown(() => pool.close())
  await pool.ready()
  const deadline = Date.now() + 60_000
  let most = 1
  for (;;) {
    most = Math.max(most, pool.workers)
    const [{ n }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE status = 'delivered' AND id = ANY(${ids}::text[])`
    if (n === N) break
    if (Date.now() > deadline) throw new Error(`only ${n} of ${N} delivered`)
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  t.ok(pool.scaleUps >= 1, `a second worker was started (${pool.scaleUps} scale-ups, at most ${most} workers seen)`)
  const got = rx.verified(path)
  const perId = new Map<string, number>()
  for (const r of got) perId.set(r.deliveryId, (perId.get(r.deliveryId) ?? 0) + 1)
  t.equal(perId.size, N, 'none lost')
  t.equal([...perId.values()].filter(c => c > 1).length, 0, 'none sent twice')
  const [a] = await sql<{ rows: number; deliveries: number; bad: number }[]>`
    SELECT count(*)::int AS rows, count(DISTINCT delivery_id)::int AS deliveries, count(*) FILTER (WHERE status_code <> 200 OR attempt <> 1)::int AS bad
    FROM webhook_attempts WHERE delivery_id = ANY(${ids}::text[])`
  t.same(a, { rows: N, deliveries: N, bad: 0 }, 'one attempt row per delivery, attempt 1, HTTP 200')
  const retireBy = Date.now() + 10_000
  while (pool.workers > 1 && Date.now() < retireBy) await new Promise(resolve => setTimeout(resolve, 50))
  t.equal(pool.workers, 1, 'the extra worker is stopped once the backlog is gone')
})

t.test('recordAttempts (one statement per batch) leaves each row as recordAttempt does', async (t) => {
  const [hook] = await sql<{ id: number }[]>`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${u.id}, ${rx.url('/gone')}, 'gone-secret-0123456789', ${['job.completed']}::text[]) RETURNING id`
  const a = await enqueue(5, '/x', 'x-secret-0123456789')
  const b = await enqueue(5, '/x', 'x-secret-0123456789')
  const hookA = await enqueue(2, '/gone', 'gone-secret-0123456789', hook.id)
  const at = new Date(Date.now() - 1000)
  const cases = (ids: string[]): AttemptRecord[] => [
    { deliveryId: ids[0], webhookId: null, attempt: 1, attemptedAt: at, statusCode: 200, latencyMs: 12, error: null, status: 'delivered', delayMs: null, disableWebhook: null },
    { deliveryId: ids[1], webhookId: null, attempt: 1, attemptedAt: at, statusCode: 500, latencyMs: 7, error: 'HTTP 500: boom\ttab "quoted" \\ back', status: 'pending', delayMs: 60_000, disableWebhook: null },
    { deliveryId: ids[2], webhookId: null, attempt: 11, attemptedAt: at, statusCode: null, latencyMs: null, error: 'connect ECONNREFUSED', status: 'failed', delayMs: null, disableWebhook: null },
    { deliveryId: ids[3], webhookId: null, attempt: 2, attemptedAt: at, statusCode: 204, latencyMs: 3, error: null, status: 'delivered', delayMs: null, disableWebhook: null },
    { deliveryId: ids[4], webhookId: null, attempt: 1, attemptedAt: at, statusCode: 400, latencyMs: 1, error: 'HTTP 400', status: 'pending', delayMs: 0, disableWebhook: null },
  ]
  await recordAttempts(sql as any, [...cases(a), { deliveryId: hookA[0], webhookId: hook.id, attempt: 1, attemptedAt: at, statusCode: 410, latencyMs: 2, error: 'HTTP 410', status: 'disabled', delayMs: null, disableWebhook: 'receiver answered 410 Gone' }])
  for (const c of cases(b)) await sql.begin(tx => recordAttempt(tx as any, c))
  const state = (ids: string[]) => sql<any[]>`
    SELECT d.status, d.attempts, d.claimed_until, d.last_status_code, d.last_error, d.last_latency_ms,
      d.next_attempt_at > now() + interval '50 seconds' AS later, d.delivered_at IS NOT NULL AS delivered,
      d.delivered_at - ${at}::timestamptz AS delivered_after,
      (SELECT json_agg(json_build_object('attempt', w.attempt, 'at', w.attempted_at, 'code', w.status_code, 'ms', w.latency_ms, 'error', w.error)) FROM webhook_attempts w WHERE w.delivery_id = d.id) AS attempts_rows
    FROM webhook_deliveries d WHERE d.id = ANY(${ids}::text[]) ORDER BY array_position(${ids}::text[], d.id)`
  const sa = [...await state(a)]
  const sb = [...await state(b)]
  t.same(sa, sb, 'same delivery state and attempt rows')
  t.equal(sa[0].status, 'delivered')
  t.equal(sa[1].status, 'pending')
  t.equal(sa[1].later, true, 'the retry is scheduled delayMs ahead')
  t.equal(sa[2].status, 'failed')
  const [gone] = await sql<any[]>`SELECT active, disabled_reason FROM webhooks WHERE id = ${hook.id}`
  t.same(gone, { active: false, disabled_reason: 'receiver answered 410 Gone' }, 'a 410 in a batch disables its webhook')
  const [other] = await sql<any[]>`SELECT status FROM webhook_deliveries WHERE id = ${hookA[1]}`
  t.equal(other.status, 'disabled', 'and its other pending deliveries')
})

/** `n` deliveries to `path`, each answered 200 after `afterMs`. */
async function slowBacklog (n: number, path: string, afterMs: number): Promise<string[]> {
  const secret = `${path.slice(1)}-secret-0123456789`
  rx.route(path, secret, Array.from({ length: n }, () => ({ status: 200, afterMs })))
  return enqueue(n, path, secret)
}

t.test('a crashed primary worker is restarted; the rows it held come back when their lease expires; none lost', async (t) => {
  const N = 1000
  const path = '/crash'
  // Slow answers keep requests in flight, so the crash lands mid-backlog with rows held.
  const ids = await slowBacklog(N, path, 100)
  const pool = new DeliveryPool({ databaseUrl: s.databaseUrl, config: s.config, version: 'test', maxWorkers: 1, leaseSeconds: 5 })
  t.teardown(() => pool.close())
  await pool.ready()
  await rx.waitFor(path, 50, 30_000)
  await pool.crash()
  // The dead worker's connections are the ones accepted so far; the new worker opens its own.
  const oldConns = rx.connections()
  t.equal(pool.restarts, 1, 'the primary was restarted')
  await pool.ready()
  const deadline = Date.now() + 60_000
  for (;;) {
    const [{ n }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE status = 'delivered' AND id = ANY(${ids}::text[])`
    if (n === N) break
    if (Date.now() > deadline) throw new Error(`only ${n} of ${N} delivered after the crash`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  const got = rx.verified(path)
  const first = new Map<string, number>()
  const again: string[] = []
  for (const r of got) {
    if (first.has(r.deliveryId)) again.push(r.deliveryId)
    else first.set(r.deliveryId, r.conn)
  }
  t.equal(first.size, N, 'none lost')
  t.ok(got.some(r => r.conn > oldConns), 'the restarted worker delivered')
  // At-least-once: only what the dead worker had sent without recording may arrive twice.
  t.same(again.filter(id => (first.get(id) as number) > oldConns), [], 'nothing the restarted worker sent was sent twice')
  t.ok(again.length <= 256, `sent twice: ${again.length}, at most the rows one worker holds`)
})

t.test('close drains: requests in flight finish and are recorded, claimed rows not yet sent are released', async (t) => {
  const N = 300
  const path = '/drain'
  const ids = await slowBacklog(N, path, 300)
  const pool = new DeliveryPool({ databaseUrl: s.databaseUrl, config: s.config, version: 'test', maxWorkers: 1 })
  await pool.ready()
  await rx.waitFor(path, 10, 30_000)
  await pool.close(8000)
  t.equal(pool.workers, 0, 'no worker left')
  const sent = new Set(rx.verified(path).map(r => r.deliveryId))
  const rows = await sql<{ id: string; status: string; claimed_until: Date | null; attempts: number }[]>`
    SELECT id, status, claimed_until, attempts FROM webhook_deliveries WHERE id = ANY(${ids}::text[])`
  t.equal(rows.length, N)
  const wrong = rows.filter(r => sent.has(r.id)
    ? !(r.status === 'delivered' && r.attempts === 1)
    : !(r.status === 'pending' && r.claimed_until === null && r.attempts === 0))
  t.same(wrong, [], 'each sent row is recorded delivered; each unsent row is pending and unclaimed')
  t.ok(sent.size >= 10 && sent.size < N, `${sent.size} sent before the close, the rest handed back`)
})

t.test('a receiver that closes every connection after answering: every delivery arrives once, first attempt, HTTP 200', async (t) => {
  const N = 400
  const seen = new Map<string, number>()
  let connections = 0
  const closer = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const id = String(req.headers['x-service-delivery'])
      seen.set(id, (seen.get(id) ?? 0) + 1)
      res.writeHead(200, { connection: 'close', 'content-type': 'text/plain' }).end('ok')
    })
  })
  closer.on('connection', () => { connections++ })
  await new Promise<void>(resolve => closer.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => { closer.closeAllConnections(); closer.close(() => resolve()) }))
  const port = (closer.address() as { port: number }).port
  const ids = (await enqueueTo(N, `http://127.0.0.1:${port}/closing`, 'closing-secret-0123456789'))
  const config = { ...s.config, webhookAllowlist: [...s.config.webhookAllowlist, `127.0.0.1:${port}`] }
  const pool = new DeliveryPool({ databaseUrl: s.databaseUrl, config, version: 'test', maxWorkers: 1 })
  t.teardown(() => pool.close())
  await pool.ready()
  const deadline = Date.now() + 60_000
  for (;;) {
    const [{ n }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE status = 'delivered' AND id = ANY(${ids}::text[])`
    if (n === N) break
    if (Date.now() > deadline) throw new Error(`only ${n} of ${N} delivered`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  t.equal(seen.size, N, 'none lost')
  t.same([...seen.values()].filter(c => c > 1), [], 'none received twice')
  t.ok(connections >= N, `one connection per delivery (${connections})`)
  const [a] = await sql<{ rows: number; bad: number }[]>`
    SELECT count(*)::int AS rows, count(*) FILTER (WHERE status_code <> 200 OR attempt <> 1)::int AS bad
    FROM webhook_attempts WHERE delivery_id = ANY(${ids}::text[])`
  t.same(a, { rows: N, bad: 0 }, 'one attempt per delivery, none failed by the closing connections')
})

t.test('rows handed to the pool (committed claimed for this node) are sent without a claim; what the worker cannot hold is released for any pool', async (t) => {
  const N = 600 // over the 256 rows one worker holds
  const path = '/handed'
  const secret = 'handed-secret-0123456789'
  rx.route(path, secret)
  const rows: ClaimedDelivery[] = Array.from({ length: N }, (_, i) => ({
    id: `dlv_${randomBytes(12).toString('base64url')}`, event_id: `evt_h${i}`, account_id: u.id, webhook_id: null, job_id: job.body.id,
    event: 'job.completed', url: rx.url(path), secret, body: JSON.stringify({ id: `evt_h${i}`, type: 'job.completed', data: { n: i } }), attempts: 0, hook_active: true,
  }))
  const ids = rows.map(r => r.id)
  await sql`INSERT INTO webhook_deliveries ${sql(rows.map(r => ({ ...r, claimed_until: new Date(Date.now() + 60_000) })) as any,
    'id', 'event_id', 'account_id', 'webhook_id', 'job_id', 'event', 'url', 'secret', 'body', 'claimed_until')}`
  const pool = new DeliveryPool({ databaseUrl: s.databaseUrl, config: s.config, version: 'test', maxWorkers: 1 })
  t.teardown(() => pool.close())
  await pool.ready()
  pool.hand(rows)
  t.equal(pool.handed, N)
  // Released rows are claimed by the pool's own poll; all of it well before the 60 s claims would lapse.
  const deadline = Date.now() + 30_000
  for (;;) {
    const [{ n }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE status = 'delivered' AND id = ANY(${ids}::text[])`
    if (n === N) break
    if (Date.now() > deadline) throw new Error(`only ${n} of ${N} handed rows delivered`)
    await new Promise(resolve => setTimeout(resolve, 20))
  }
  const perId = new Map<string, number>()
  for (const r of rx.verified(path)) perId.set(r.deliveryId, (perId.get(r.deliveryId) ?? 0) + 1)
  t.equal(perId.size, N, 'none lost')
  t.equal([...perId.values()].filter(c => c > 1).length, 0, 'none sent twice')
  const [a] = await sql<{ rows: number; bad: number; claimed: number }[]>`
    SELECT count(*)::int AS rows, count(*) FILTER (WHERE w.status_code <> 200 OR w.attempt <> 1)::int AS bad,
      count(*) FILTER (WHERE d.claimed_until IS NOT NULL)::int AS claimed
    FROM webhook_attempts w JOIN webhook_deliveries d ON d.id = w.delivery_id WHERE w.delivery_id = ANY(${ids}::text[])`
  t.same(a, { rows: N, bad: 0, claimed: 0 }, 'one attempt each, the first, HTTP 200; every claim cleared')
})
