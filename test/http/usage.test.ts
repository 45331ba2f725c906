// Usage analytics (docs/api.md "Usage and limits"; shapes of docs/api.md "Endpoints"): GET /v1/usage/summary and /v1/usage/limits.
import t from 'tap'
import postgres from 'postgres'
import { explainUsageRows } from '../../src/db/usage.js'
import { summaryRange } from '../../src/http/routes/usage.js'
import { assertError } from '../helpers/assert.js'
import { createUser, startServer } from '../helpers/server.js'

// SIM_SPEED 1 (the default): a nano-banana image takes 15 s, so a new job stays in flight for
// the whole test. The rate window is opened wide; concurrency caps keep their defaults.
const s = await startServer(t, { TIER_LIMITS: JSON.stringify({ free: { rpm: 1_000_000 }, pro: { rpm: 1_000_000 }, session: { rpm: 1_000_000 } }) })
const db = postgres(s.databaseUrl, { max: 2, onnotice: () => {}, types: { bigint: postgres.BigInt } })
t.teardown(() => db.end())

const DAY = 86_400_000
const today = () => new Date().toISOString().slice(0, 10)
const dayOffset = (n: number) => new Date(Date.parse(`${today()}T00:00:00Z`) + n * DAY).toISOString().slice(0, 10)
const STATUSES = ['queued', 'submitted', 'processing', 'completed', 'failed', 'cancelled']

t.test('summary defaults to the last 30 days through today (UTC), every day listed with zeros', async (t) => {
  const u = await createUser(s)
  const r = await s.req('GET', '/v1/usage/summary', { key: u.key })
  t.equal(r.status, 200)
  const b = r.body
  t.equal(b.to, today())
  t.equal(b.from, dayOffset(-29))
  t.equal(b.daily.length, 30)
  t.same(b.daily.map((d: any) => d.date), Array.from({ length: 30 }, (_, i) => dayOffset(i - 29)), 'oldest first, consecutive')
  t.same(Object.keys(b).sort(), ['credits_charged', 'credits_refunded', 'daily', 'from', 'jobs_by_model', 'jobs_by_status', 'net_credits', 'requests', 'to'])
  t.same(b.jobs_by_status, Object.fromEntries(STATUSES.map(x => [x, 0])), 'every status listed')
  t.same(b.jobs_by_model, {})
  t.equal(b.credits_charged, 0)
  t.equal(b.credits_refunded, 0)
  t.equal(b.net_credits, 0)
  // The only earlier request of this account is the session's POST /v1/auth/keys (createUser).
  t.equal(b.requests, 1, 'the caller\'s earlier request is counted: metering is flushed first')
  t.equal(b.daily[29].requests, 1)
  t.equal(r.headers.get('cache-control'), 'no-store')
  const again = await s.req('GET', '/v1/usage/summary', { key: u.key })
  t.equal(again.body.requests, 2, 'the previous summary request counts too')
  const only = await s.req('GET', `/v1/usage/summary?to=${dayOffset(-1)}`, { key: u.key })
  t.equal(only.body.from, dayOffset(-30), 'from defaults to to - 29 days')
  t.equal(only.body.requests, 0, 'today is outside the range')
})

t.test('summary validation: bad dates, reversed or over-long ranges answer 400 VALIDATION_ERROR', async (t) => {
  const u = await createUser(s)
  for (const q of ['from=2025-02-30', 'to=2025-13-01', 'from=2025-1-1', 'from=yesterday', 'to=2025-01-01T00:00:00Z', 'from=2025-03-02&to=2025-03-01', 'from=2024-01-01&to=2025-01-01', `from=${dayOffset(-366)}`]) {
    const r = await s.req('GET', `/v1/usage/summary?${q}`, { key: u.key })
    assertError(t, r, 400, 'VALIDATION_ERROR', q)
    t.ok(Array.isArray(r.body.details) && r.body.details.length > 0, `${q}: details`)
  }
  const leap = await s.req('GET', '/v1/usage/summary?from=2024-01-01&to=2024-12-31', { key: u.key })
  t.equal(leap.status, 200, '366 days (a leap year) is the longest range')
  t.equal(leap.body.daily.length, 366)
  const one = await s.req('GET', '/v1/usage/summary?from=2025-06-01&to=2025-06-01', { key: u.key })
  t.equal(one.status, 200)
  t.same(one.body.daily, [{ date: '2025-06-01', requests: 0, credits: 0, jobs: 0 }])
  t.same(summaryRange({}, Date.parse('2024-03-01T23:59:59Z')), { from: '2024-02-01', to: '2024-03-01', days: 30 }, 'across a leap day')
})

t.test('usage endpoints need a credential', async (t) => {
  for (const path of ['/v1/usage/summary', '/v1/usage/limits']) {
    assertError(t, await s.req('GET', path), 401, 'AUTH_REQUIRED', path)
  }
})

t.test('a created job shows up in the summary and the limits; a cancelled one is refunded', async (t) => {
  const u = await createUser(s, { credits: 200 })
  const job = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'x' } })
  t.equal(job.status, 201, job.text)
  const charge = job.body.credits_charged ?? 10
  // [sim:queue]: the simulated provider has no capacity, so the job stays queued and can be cancelled.
  const queued = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'y [sim:queue]' } })
  t.equal(queued.status, 201, queued.text)
  const cancel = await s.req('DELETE', `/v1/jobs/${queued.body.id}`, { key: u.key })
  t.equal(cancel.status, 200, cancel.text)
  t.equal(cancel.body.status, 'cancelled')

  const r = await s.req('GET', '/v1/usage/summary', { key: u.key })
  t.equal(r.status, 200)
  const b = r.body
  t.same(b.jobs_by_model, { 'nano-banana': 2 })
  t.equal(b.jobs_by_status.cancelled, 1)
  t.equal(STATUSES.reduce((n, x) => n + b.jobs_by_status[x], 0), 2)
  t.equal(b.jobs_by_status.queued + b.jobs_by_status.submitted + b.jobs_by_status.processing, 1, 'the first job is still in flight')
  t.equal(b.credits_charged, 2 * charge, 'charges reported as a positive number')
  t.equal(b.credits_refunded, charge, 'the cancelled job was refunded in full')
  t.equal(b.net_credits, charge)
  t.equal(b.requests, 4, 'metered: POST /auth/keys, two POST /generate/image, DELETE /jobs/:id')
  t.same(b.daily[b.daily.length - 1], { date: today(), requests: 4, credits: charge, jobs: 2 }, 'today: net credits and jobs')
  const credits = await s.req('GET', '/v1/credits', { key: u.key })
  t.equal(credits.body.credits, 200 - b.net_credits, 'the net spend matches the balance')

  const l = await s.req('GET', '/v1/usage/limits', { key: u.key })
  t.equal(l.status, 200)
  t.same(l.body, {
    tier: 'free',
    rate_limit_rpm: 1_000_000,
    max_concurrent: 3,
    in_flight: 1,
    max_streams: 5,
    open_streams: 0,
    active_keys: 1,
    max_active_keys: 5,
    active_webhooks: 0,
    max_active_webhooks: 5,
  })
})

t.test('limits: tier follows purchases; a session sees its own rate limit and the account\'s in-flight jobs', async (t) => {
  const u = await createUser(s, { credits: 500 })
  const job = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'x' } })
  t.equal(job.status, 201)
  const k2 = await s.req('POST', '/v1/auth/keys', { jwt: u.jwt, body: { name: 'second' } })
  t.equal(k2.status, 201)
  await db`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${u.id}, 'https://example.com/a', 'sssssssssssssssss', ${['job.completed']}::text[]),
    (${u.id}, 'https://example.com/b', 'sssssssssssssssss', ${['job.completed']}::text[])`
  await db`INSERT INTO webhooks (account_id, url, secret, events, deleted_at) VALUES (${u.id}, 'https://example.com/c', 'sssssssssssssssss', ${['job.failed']}::text[], now())`

  const other = await s.req('GET', '/v1/usage/limits', { key: k2.body.key })
  t.equal(other.body.in_flight, 0, 'in_flight counts the calling key\'s jobs')
  t.equal(other.body.active_keys, 2)
  t.equal(other.body.active_webhooks, 2, 'deleted webhooks are not counted')

  const session = await s.req('GET', '/v1/usage/limits', { jwt: u.jwt })
  t.equal(session.status, 200)
  t.equal(session.body.tier, 'free', 'a session reports the account\'s tier')
  t.equal(session.body.rate_limit_rpm, s.config.tierLimits.session.rpm, 'and the session rate limit')
  t.equal(session.body.in_flight, 1, 'a session counts the whole account')

  const p = await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 100 } })
  t.equal(p.status, 201)
  const pro = await s.req('GET', '/v1/usage/limits', { key: u.key })
  t.equal(pro.body.tier, 'pro')
  t.equal(pro.body.max_concurrent, 10)
  t.equal(pro.body.max_streams, 50)
})

t.test('summary over 90 days of heavy traffic reads the rollup, never raw rows', async (t) => {
  const u = await createUser(s)
  const ENDPOINTS = 200
  // 90 days x 200 endpoints for this account, and 30 other accounts' rows around it.
  await db`
    INSERT INTO usage_daily (account_id, day, endpoint, requests, errors, credits, latency_ms_sum)
    SELECT ${u.id}, current_date - d, 'GET /v1/e' || e, 10 + e + d, 0, 0, 1
    FROM generate_series(1, 90) d, generate_series(1, ${ENDPOINTS}) e`
  await db`
    INSERT INTO usage_daily (account_id, day, endpoint, requests, errors, credits, latency_ms_sum)
    SELECT 1000000 + a, current_date - d, 'GET /v1/e' || e, 1, 0, 0, 1
    FROM generate_series(1, 30) a, generate_series(1, 90) d, generate_series(1, 50) e`
  // Raw rows that disagree with the rollup: a summary that scanned them would answer differently.
  await db`
    INSERT INTO request_log (at, account_id, key_id, method, endpoint, status, credits, latency_ms, request_id)
    SELECT now() - (i % 90 + 1) * interval '1 day', ${u.id}, ${u.keyId}, 'GET', '/v1/raw', 200, 0, 1, 'r' || i
    FROM generate_series(1, 200000) i`
  await db`ANALYZE usage_daily`
  await db`ANALYZE request_log`
  const [{ n }] = await db<{ n: bigint }[]>`SELECT count(*) AS n FROM request_log WHERE account_id = ${u.id}`
  t.ok(n >= 200_000n, `${n} raw rows for the account`)

  // Expected from the rollup: day d (1..90 days ago) has sum over e of (10 + e + d).
  const perDay = (d: number) => ENDPOINTS * (10 + d) + ENDPOINTS * (ENDPOINTS + 1) / 2
  const from = dayOffset(-90)
  const to = dayOffset(-1)
  const times: number[] = []
  let body: any
  for (let i = 0; i < 7; i++) {
    const t0 = performance.now()
    const r = await s.req('GET', `/v1/usage/summary?from=${from}&to=${to}`, { key: u.key })
    times.push(performance.now() - t0)
    t.equal(r.status, 200)
    body = r.body
  }
  t.equal(body.daily.length, 90)
  let total = 0
  for (let i = 0; i < 90; i++) {
    const d = 90 - i
    total += perDay(d)
    if (body.daily[i].requests !== perDay(d)) { t.fail(`day ${body.daily[i].date}: ${body.daily[i].requests} != ${perDay(d)}`); break }
  }
  t.equal(body.requests, total, `requests = the rollup's ${total}, not the raw rows`)
  times.sort((a, b) => a - b)
  const median = times[3]
  // Shown, not asserted (a timed assertion fails on a loaded machine, as it did once inside a
  // loaded test run at 271 ms): the plans below are what keeps it fast at any traffic.
  t.comment(`summary over 90 days x ${ENDPOINTS} endpoints: median ${median.toFixed(1)} ms, min ${times[0].toFixed(1)} ms (HTTP round trip included)`)

  const plans = await explainUsageRows(s.app.services.sql, u.id, from, to)
  const text = JSON.stringify(plans)
  t.notMatch(text, /request_log/, 'no plan touches request_log')
  t.match(text, /usage_daily/, 'requests come from usage_daily')
  const relations: string[] = []
  const walk = (n: any) => {
    if (n && typeof n === 'object') {
      if (n['Relation Name'] || n['Index Name']) relations.push(`${n['Node Type']}${n['Relation Name'] ? ` on ${n['Relation Name']}` : ''}${n['Index Name'] ? ` using ${n['Index Name']}` : ''}`)
      for (const v of Object.values(n)) walk(v)
    }
  }
  walk(plans)
  t.comment(relations.join('; '))
  t.ok(relations.some(r => /using usage_daily_pkey/.test(r)), 'usage_daily is read through its primary key')
  t.notOk(relations.some(r => /^Seq Scan/.test(r)), 'no sequential scan')
})
