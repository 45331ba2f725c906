// Request metering writes (src/db/metering.ts) against a real PostgreSQL.
import t from 'tap'
import pino from 'pino'
import { connect } from '../../src/db/connect.js'
import { EndpointTable, MeterColumns, pruneMetering, writeMeterBatch, type MeterRow } from '../../src/db/metering.js'
import { migrate } from '../../src/db/migrate.js'
import { labelsOf, MAX_LABELS } from '../../src/db/meter-rollup.js'
import { freshDatabase } from '../helpers/db.js'
import { Metering } from '../../src/metering.js'
import { within } from '../helpers/wait.js'

const sql = connect(await freshDatabase(t), { max: 2 })
t.teardown(() => sql.end({ timeout: 5 }))
await migrate(sql)

t.test('a flush larger than one INSERT can carry (65534 parameters) is written whole, in one transaction', async (t) => {
  // 9 columns per row: 7282 rows already exceed one statement; a busy second buffers far more.
  const n = 12_001
  const at = new Date()
  const rows: MeterRow[] = Array.from({ length: n }, (_, i) => ({
    at, account_id: 1 + (i % 3), key_id: null, method: 'GET', endpoint: '/v1/models', status: i % 10 === 0 ? 500 : 200, credits: 0, latency_ms: 0.5, request_id: `req_${i}`,
  }))
  await writeMeterBatch(sql, rows)
  const [{ raw }] = await sql<{ raw: number }[]>`SELECT count(*)::int AS raw FROM request_log`
  t.equal(raw, n, 'every raw row')
  const [{ requests, errors }] = await sql<{ requests: number; errors: number }[]>`SELECT sum(requests)::int AS requests, sum(errors)::int AS errors FROM usage_daily`
  t.equal(requests, n, 'every row rolled up')
  t.equal(errors, Math.ceil(n / 10))
})

t.test('values that COPY text would misread (tab, newline, backslash) are stored as given', async (t) => {
  const odd = 'req\ta\\b\nc\rd\\N'
  await writeMeterBatch(sql, [{ at: new Date(), account_id: null, key_id: 7, method: 'GET', endpoint: '/v1/x\\y', status: 404, credits: 0, latency_ms: 1e-7, request_id: odd }])
  const [r] = await sql<{ request_id: string; endpoint: string; account_id: number | null; key_id: number }[]>`SELECT request_id, endpoint, account_id, key_id FROM request_log WHERE key_id = 7`
  t.equal(r.request_id, odd)
  t.equal(r.endpoint, '/v1/x\\y')
  t.equal(r.account_id, null)
})

t.test('a path metered as an interned prefix plus its tail, and the same path metered raw, roll up as one endpoint', async (t) => {
  // The fast path meters GET /v1/jobs/{id} as (GET, /v1/jobs/ + the cached id); the full
  // pipeline meters the requested URL as given. One flush holding both must add up, not clash.
  const endpoints = new EndpointTable()
  const jobs = endpoints.id('GET', '/v1/jobs/', true)
  const models = endpoints.id('GET', '/v1/models')
  const c = new MeterColumns(4, endpoints, 'feedf00d')
  const at = Date.UTC(2030, 0, 2, 3, 4, 5)
  c.push(at, 42, 9, jobs, 'GET', 'job_aaaaaaaaaaaaaaaa', 200, 0, 1.2345678, 1, null)
  c.push(at, 42, 9, jobs, 'GET', 'job_aaaaaaaaaaaaaaaa', 200, 0, 2, 2, null)
  c.push(at, 42, 9, -1, 'GET', '/v1/jobs/job_aaaaaaaaaaaaaaaa', 404, 0, 3, NaN, 'client-id')
  c.push(at, 42, 9, models, 'GET', null, 200, 0, 4, 3, null)
  await writeMeterBatch(sql, c)
  const raw = await sql<{ endpoint: string; request_id: string; latency_ms: number }[]>`
    SELECT endpoint, request_id, latency_ms FROM request_log WHERE account_id = 42 ORDER BY id`
  t.same(raw.map(r => [r.endpoint, r.request_id]), [
    ['/v1/jobs/job_aaaaaaaaaaaaaaaa', 'req_feedf00d1'], ['/v1/jobs/job_aaaaaaaaaaaaaaaa', 'req_feedf00d2'],
    ['/v1/jobs/job_aaaaaaaaaaaaaaaa', 'client-id'], ['/v1/models', 'req_feedf00d3'],
  ])
  t.equal(raw[0].latency_ms, 1.235, 'latency kept to the microsecond')
  const daily = await sql<{ endpoint: string; requests: number; errors: number; latency_ms_sum: number }[]>`
    SELECT endpoint, requests::int, errors::int, latency_ms_sum FROM usage_daily WHERE account_id = 42 ORDER BY endpoint`
  t.same(daily.map(d => [d.endpoint, d.requests, d.errors]), [['GET /v1/jobs/job_aaaaaaaaaaaaaaaa', 3, 1], ['GET /v1/models', 1, 0]])
  t.ok(Math.abs(daily[0].latency_ms_sum - 6.2345678) < 1e-9, 'the rollup sums unrounded latencies')
})

t.test('every column survives the binary COPY exactly: big ids, NULLs, times to the microsecond, UTF-8, counters across digit boundaries', async (t) => {
  const endpoints = new EndpointTable()
  const c = new MeterColumns(2, endpoints, '0badcafe') // grows while filled
  const at = Date.UTC(2031, 5, 7, 8, 9, 10, 123)
  const big = 2 ** 40 + 12345 // needs the high 32 bits
  const counters = [0, 35, 36, 1295, 1296, 2 ** 31, 2 ** 52 + 1]
  for (const n of counters) c.push(at, big, NaN, -1, 'GET', '/v1/ünïcode/€', 201, 7, 0.0015, n, null)
  c.push(Date.UTC(1999, 11, 31, 23, 59, 59, 999), NaN, 3, -1, 'PATCH', '/v1/old', 500, 0, 12.5, NaN, 'own-id'.repeat(20))
  await writeMeterBatch(sql, c)
  const rows = await sql<{ at: Date; account_id: string | null; key_id: string | null; method: string; endpoint: string; status: number; credits: number; latency_ms: number; request_id: string }[]>`
    SELECT at, account_id::text, key_id::text, method, endpoint, status, credits, latency_ms, request_id FROM request_log
    WHERE request_id LIKE 'req_0badcafe%' OR request_id LIKE 'own-id%' ORDER BY id`
  t.same(rows.map(r => r.request_id), [...counters.map(n => `req_0badcafe${n.toString(36)}`), 'own-id'.repeat(20)])
  t.equal(rows[0].at.getTime(), at)
  t.equal(rows[0].account_id, String(big))
  t.equal(rows[0].key_id, null)
  t.equal(rows[0].endpoint, '/v1/ünïcode/€')
  t.same([rows[0].method, rows[0].status, rows[0].credits], ['GET', 201, 7])
  t.equal(rows[0].latency_ms, 0.002, 'latency to the microsecond (0.0015 ms rounds to 2 µs)')
  const last = rows[rows.length - 1]
  t.equal(last.at.getTime(), Date.UTC(1999, 11, 31, 23, 59, 59, 999), 'a time before PostgreSQL\'s epoch')
  t.same([last.account_id, last.key_id, last.method, last.endpoint, last.status, last.latency_ms], [null, '3', 'PATCH', '/v1/old', 500, 12.5])
  const [d] = await sql<{ requests: number; credits: number }[]>`SELECT requests::int, credits::int FROM usage_daily WHERE account_id = ${big}`
  t.same([d.requests, d.credits], [counters.length, 7 * counters.length])
})

t.test('endpoint labels are kept across flushes, one per text, and dropped between flushes once past their bound', async (t) => {
  const endpoints = new EndpointTable()
  const jobs = endpoints.id('GET', '/v1/jobs/', true)
  const labels = labelsOf(endpoints)
  t.equal(labelsOf(endpoints), labels, 'one table per EndpointTable')
  const c = new MeterColumns(16, endpoints, 'cafe')
  c.push(0, 1, 1, jobs, 'GET', 'job_a', 200, 0, 1, 1, null)
  c.push(0, 1, 1, -1, 'GET', '/v1/jobs/job_a', 404, 0, 1, NaN, 'x')
  c.push(0, 1, 1, jobs, 'GET', 'job_b', 200, 0, 1, 2, null)
  t.same([labels.of(c, 0), labels.of(c, 1), labels.of(c, 2)], [0, 0, 1], 'a suffixed row and a raw row naming the same path share a number')
  const n = labels.size
  for (let i = 0; i < 3; i++) labels.of(c, i)
  t.equal(labels.size, n, 'the same rows again add nothing')
  const many = new MeterColumns(MAX_LABELS + 1, endpoints, 'cafe')
  for (let i = 0; i <= MAX_LABELS; i++) many.push(0, 1, 1, jobs, 'GET', `job_${i}`, 200, 0, 1, i, null)
  for (let i = 0; i < many.length; i++) labels.of(many, i)
  t.ok(labels.size > MAX_LABELS)
  labels.users++
  labels.trim()
  t.ok(labels.size > MAX_LABELS, 'not while a flush holds numbers')
  labels.users--
  labels.trim()
  t.equal(labels.size, 0, 'dropped between flushes')
  await writeMeterBatch(sql, c)
  const [{ n: daily }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM usage_daily WHERE endpoint LIKE 'GET /v1/jobs/job_%' AND account_id = 1`
  t.equal(daily, 2, 'the numbers made after the drop still write the right rollup')
})

t.test('flushes from two threads over the same accounts in opposite orders never deadlock: every row is counted', async (t) => {
  // FRONTENDS=2: each front-end thread flushes its own buffer in its own transaction; both
  // upsert the same (account, day, endpoint) rollup rows. Taken in different orders, the row
  // locks deadlocked and PostgreSQL aborted one flush (GET /v1/usage/summary then missed the
  // requests it had just flushed).
  const at = Date.UTC(2032, 1, 3)
  const groups = 300
  const batch = (reverse: boolean) => {
    const endpoints = new EndpointTable()
    const ep = endpoints.id('GET', '/v1/models')
    const c = new MeterColumns(groups, endpoints, 'dead')
    for (let i = 0; i < groups; i++) c.push(at, 5000 + (reverse ? groups - 1 - i : i), NaN, ep, 'GET', null, 200, 0, 1, i, null)
    return c
  }
  const rounds = 15
  for (let r = 0; r < rounds; r++) await Promise.all([writeMeterBatch(sql, batch(false)), writeMeterBatch(sql, batch(true))])
  const [{ n }] = await sql<{ n: number }[]>`SELECT sum(requests)::int AS n FROM usage_daily WHERE day = '2032-02-03'`
  t.equal(n, rounds * groups * 2)
})

t.test('flushFor tries again when a flush fails: the account\'s rows are written before it resolves', async (t) => {
  // The first rollup upsert fails (a trigger raises once; the transaction rolls back); the rows go
  // back to the buffer.
  await sql.unsafe(`
    CREATE SEQUENCE meter_fail_once;
    CREATE FUNCTION meter_fail_once () RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF nextval('meter_fail_once') = 1 THEN RAISE EXCEPTION 'injected flush failure'; END IF; RETURN NULL; END $$;
    CREATE TRIGGER meter_fail_once AFTER INSERT ON usage_daily FOR EACH STATEMENT EXECUTE FUNCTION meter_fail_once();`)
  t.teardown(() => sql.unsafe('DROP TRIGGER meter_fail_once ON usage_daily; DROP FUNCTION meter_fail_once; DROP SEQUENCE meter_fail_once'))
  const m = new Metering(sql, pino({ level: 'silent' }), new Map(), 30, 3_600_000)
  m.push(Date.now(), 4242, NaN, -1, 'GET', '/v1/credits', 200, 0, 1, 1, null)
  await m.flushFor(4242)
  const [{ n }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM request_log WHERE account_id = 4242`
  t.equal(n, 1, 'written by the second try')
  t.equal(m.pending, 0)
  await m.close()
})

t.test('flushFor waits for a flush that took the account\'s rows while it waited (the timer\'s)', async (t) => {
  const m = new Metering(sql, pino({ level: 'silent' }), new Map(), 30, 3_600_000)
  m.push(Date.now(), 90001, NaN, -1, 'GET', '/v1/credits', 200, 0, 1, 1, null)
  const first = m.flush() // in flight: holds account 90001's row only
  m.push(Date.now(), 90002, NaN, -1, 'GET', '/v1/credits', 200, 0, 1, 2, null)
  const timer = m.flush() // queued first: takes 90002's row once the first flush ends
  await m.flushFor(90002)
  const [{ n }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM request_log WHERE account_id = 90002`
  t.equal(n, 1, 'written when flushFor resolves')
  await Promise.all([first, timer])
  await m.close()
})

t.test('a COPY the server refuses after its last byte fails the flush (postgres.js alone waits forever) and frees the connection', async (t) => {
  await sql.unsafe(`
    CREATE FUNCTION copy_refused () RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'injected COPY failure'; END $$;
    CREATE TRIGGER copy_refused AFTER INSERT ON request_log FOR EACH STATEMENT EXECUTE FUNCTION copy_refused();`)
  const row = (id: string): MeterRow[] => [{ at: new Date(), account_id: 90003, key_id: null, method: 'GET', endpoint: '/v1/x', status: 200, credits: 0, latency_ms: 1, request_id: id }]
  for (let i = 0; i < 3; i++) { // more attempts than the pool (2) has connections
    // A hung attempt fails the test here: its transaction holds request_log, nothing more can run.
    const r = await within(writeMeterBatch(sql, row(`refused-${i}`)).then(() => 'written', (err: Error) => err.message),
      { what: `attempt ${i}'s refused COPY to settle`, timeoutMs: 20_000 })
    t.equal(r, 'injected COPY failure', `attempt ${i} rejected with the server's error`)
  }
  await sql.unsafe('DROP TRIGGER copy_refused ON request_log; DROP FUNCTION copy_refused')
  await writeMeterBatch(sql, row('after'))
  const [{ n }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM request_log WHERE account_id = 90003`
  t.equal(n, 1, 'the refused rows rolled back; the connections serve the next flush')
})

t.test('request_log carries only a BRIN index on at; the prune deletes rows past retention through it and keeps the rollup', async (t) => {
  const idx = await sql<{ indexname: string; indexdef: string }[]>`SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'request_log'`
  t.same(idx.map(i => i.indexname), ['request_log_at_brin'], 'no per-row btree: a metered request costs one heap row and a BRIN summary')
  const day = 86_400_000
  const row = (ageDays: number, id: string): MeterRow => ({ at: new Date(Date.now() - ageDays * day), account_id: 90004, key_id: null, method: 'GET', endpoint: '/v1/p', status: 200, credits: 0, latency_ms: 1, request_id: id })
  await writeMeterBatch(sql, [row(40, 'old-1'), row(31, 'old-2'), row(29, 'new-1'), row(0, 'new-2')])
  const before = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM request_log WHERE at < now() - interval '30 days'`
  t.equal(await pruneMetering(sql, 30), before[0].n, 'every row past 30 days (the 1999 row of an earlier test too)')
  const left = await sql<{ request_id: string }[]>`SELECT request_id FROM request_log WHERE account_id = 90004 ORDER BY at`
  t.same(left.map(r => r.request_id), ['new-1', 'new-2'])
  const [{ n }] = await sql<{ n: number }[]>`SELECT sum(requests)::int AS n FROM usage_daily WHERE account_id = 90004`
  t.equal(n, 4, 'the daily rollup keeps every request')
  const plan = await sql.begin(async (tx) => {
    await tx`SET LOCAL enable_seqscan = off`
    return tx.unsafe(`EXPLAIN DELETE FROM request_log WHERE at < now() - make_interval(days => 30)`)
  })
  t.match(plan.map((r: any) => r['QUERY PLAN']).join('\n'), /request_log_at_brin/, 'the prune can use the BRIN index')
})
