// Webhook delivery end to end (docs/api.md "Webhooks"; docs/architecture.md "Threads"): real jobs on the simulated
// provider, the outbox written in the terminal transaction, the delivery worker, and a local
// receiver (test/fixtures/webhook-receiver.ts) that checks every signature with its own code.
import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { pino } from 'pino'
import postgres from 'postgres'
import t from 'tap'
import { createApp, type App } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { privateHostsName, startReceiver, type Received } from '../fixtures/webhook-receiver.js'
import { freshDatabase } from '../helpers/db.js'
import { ADMIN_TOKEN, createUser, JWT_SECRET, startServer, type Res, type TestServer, type TestUser } from '../helpers/server.js'
import { sleep, waitFor } from '../helpers/wait.js'

const rx = await startReceiver()
t.teardown(() => rx.close())

const ENV = {
  SIM_SPEED: '300',
  WEBHOOK_ALLOWLIST: `127.0.0.1:${rx.port}`,
  WEBHOOK_RETRY_SCALE: '0.001',
  TIER_LIMITS: '{"free":{"rpm":100000,"max_concurrent":1000}}',
}
const s = await startServer(t, ENV)

const ISO = (v: unknown) => typeof v === 'string' && new Date(v).toISOString() === v
let seq = 0
const secretFor = () => `secret-${process.pid}-${++seq}-abcdefghij`

/** A fresh receiver path with its own secret. */
function destination (name: string, answers: Array<number | 'hang'> = []): { path: string; url: string; secret: string } {
  const path = `/${name}-${++seq}`
  const secret = secretFor()
  rx.route(path, secret, answers)
  return { path, url: rx.url(path), secret }
}

async function register (srv: TestServer, u: TestUser, dest: { url: string; secret: string }, events = ['job.completed', 'job.failed']): Promise<number> {
  const r = await srv.req('POST', '/v1/webhooks', { key: u.key, body: { url: dest.url, events, secret: dest.secret } })
  if (r.status !== 201) throw new Error(`register: ${r.status} ${r.text}`)
  return r.body.id
}

/** An image job (nano-banana, 10 credits), optionally with its own webhook. */
async function imageJob (srv: TestServer, u: TestUser, prompt: string, dest?: { url: string; secret: string }): Promise<string> {
  const body: Record<string, unknown> = { model: 'nano-banana', prompt }
  if (dest) { body.webhook_url = dest.url; body.webhook_secret = dest.secret }
  const r = await srv.req('POST', '/v1/generate/image', { key: u.key, body })
  if (r.status !== 201) throw new Error(`generate: ${r.status} ${r.text}`)
  return r.body.id
}

const until = <T>(what: string, fn: () => Promise<T>, timeoutMs = 15000) => waitFor(fn, { what, timeoutMs, everyMs: 25 })

async function jobDone (srv: TestServer, u: TestUser, id: string): Promise<any> {
  return until(`job ${id}`, async () => {
    const r = await srv.req('GET', `/v1/jobs/${id}`, { key: u.key })
    return ['completed', 'failed', 'cancelled'].includes(r.body.status) ? r.body : null
  })
}

async function deliveries (srv: TestServer, u: TestUser, hookId: number): Promise<Res> {
  const r = await srv.req('GET', `/v1/webhooks/${hookId}/deliveries`, { key: u.key })
  if (r.status !== 200) throw new Error(`deliveries: ${r.status} ${r.text}`)
  return r
}

function assertSigned (t: any, r: Received, event: string): void {
  t.equal(r.rejected, null, 'the receiver verified the signature')
  t.equal(r.headers['content-type'], 'application/json')
  t.equal(r.event, event, `X-Service-Event ${event}`)
  t.match(r.deliveryId, /^dlv_[A-Za-z0-9_-]+$/, 'X-Service-Delivery')
  t.match(String(r.headers['user-agent']), /^genjobs-webhooks\//)
  t.match(String(r.headers['x-service-signature']), /^t=\d+,sha256=[0-9a-f]{64}$/)
  t.ok(Math.abs(r.t - Date.now() / 1000) < 10, 't is the time of the attempt')
}

t.test('a completed job is delivered to its per-job webhook_url and to a registered webhook, signed, with the DESIGN.md 7 body', async t => {
  const u = await createUser(s)
  const reg = destination('reg')
  const own = destination('own')
  const hookId = await register(s, u, reg, ['job.completed'])
  const jobId = await imageJob(s, u, 'a red fox in the snow', own)
  const [a] = await rx.waitFor(own.path, 1)
  const [b] = await rx.waitFor(reg.path, 1)
  assertSigned(t, a, 'job.completed')
  assertSigned(t, b, 'job.completed')
  t.not(a.deliveryId, b.deliveryId, 'one delivery per destination')
  t.equal(a.body, b.body, 'the same event body to both')
  t.same(Object.keys(a.json).sort(), ['created_at', 'data', 'id', 'type'])
  t.match(a.json.id, /^evt_/)
  t.equal(a.json.type, 'job.completed')
  t.ok(ISO(a.json.created_at))
  t.same(Object.keys(a.json.data), ['job'])
  const job = await jobDone(s, u, jobId)
  t.equal(a.json.data.job.id, jobId)
  t.equal(a.json.data.job.status, 'completed')
  t.equal(a.json.data.job.result_url, job.result_url)
  t.same(a.json.data.job, job, 'data.job is the Job of GET /v1/jobs/{id}')

  const r = await until('delivered', async () => {
    const d = await deliveries(s, u, hookId)
    return d.body.data[0]?.status === 'delivered' ? d : null
  })
  t.equal(r.body.total, 1)
  const d = r.body.data[0]
  t.same(Object.keys(d).sort(), ['attempts', 'attempts_history', 'created_at', 'delivered_at', 'event', 'event_id', 'id', 'job_id',
    'last_error', 'last_latency_ms', 'last_status_code', 'next_attempt_at', 'request_body', 'status'])
  t.equal(d.id, b.deliveryId, 'the history names the X-Service-Delivery id')
  t.equal(d.event, 'job.completed')
  t.equal(d.event_id, a.json.id)
  t.same(d.request_body, a.json, 'request_body is the signed body that was sent')
  t.equal(d.job_id, jobId)
  t.equal(d.attempts, 1)
  t.equal(d.last_status_code, 200)
  t.equal(d.last_error, null)
  t.type(d.last_latency_ms, 'number')
  t.equal(d.next_attempt_at, null)
  t.ok(ISO(d.delivered_at) && ISO(d.created_at))
  t.equal(d.attempts_history.length, 1)
  t.same(Object.keys(d.attempts_history[0]).sort(), ['attempt', 'attempted_at', 'error', 'latency_ms', 'manual', 'response_excerpt', 'status_code'])
  t.equal(d.attempts_history[0].status_code, 200)
  t.equal(d.attempts_history[0].attempt, 1)
  await sleep(300) // time: a duplicate send would come later, so "exactly once" needs a window in which none arrives
  t.equal(rx.received.filter(x => x.path === own.path || x.path === reg.path).length, 2, 'each destination got it exactly once')
})

t.test('a completion\'s outbox rows go to this node\'s delivery worker in memory: inserted claimed, no pool woken, sent at once', async t => {
  const u = await createUser(s)
  const reg = destination('handed')
  await register(s, u, reg, ['job.completed'])
  const listener = postgres(s.databaseUrl, { max: 1 })
  t.teardown(() => listener.end({ timeout: 2 }))
  const payloads: string[] = []
  const l = await listener.listen('webhook_deliveries', (p) => { payloads.push(p) })
  const jobId = await imageJob(s, u, 'a kingfisher over a stream')
  const [r] = await rx.waitFor(reg.path, 1)
  assertSigned(t, r, 'job.completed')
  t.equal(r.json.data.job.id, jobId)
  // Notifications arrive in commit order: the completion's would come before this one.
  await listener`SELECT pg_notify('webhook_deliveries', 'sentinel')`
  await until('the sentinel', async () => payloads.includes('sentinel') || null)
  await l.unlisten()
  t.same(payloads, ['sentinel'], 'the completion woke no pool: its row was born claimed, and sent well inside its 60 s claim')
  const [row] = await listener<Array<{ status: string; attempts: number; claimed: boolean }>>`
    SELECT status, attempts, claimed_until IS NOT NULL AS claimed FROM webhook_deliveries WHERE id = ${r.deliveryId}`
  t.same(row, { status: 'delivered', attempts: 1, claimed: false }, 'recorded delivered on the first attempt, claim cleared')
})

t.test('[sim:fail] delivers job.failed; a webhook subscribed only to job.completed gets nothing', async t => {
  const u = await createUser(s)
  const failed = destination('failed-reg')
  const onlyCompleted = destination('only-completed')
  const own = destination('failed-own')
  await register(s, u, failed, ['job.failed'])
  const quietId = await register(s, u, onlyCompleted, ['job.completed'])
  const jobId = await imageJob(s, u, '[sim:fail] a lighthouse', own)
  const [a] = await rx.waitFor(own.path, 1)
  const [b] = await rx.waitFor(failed.path, 1)
  for (const r of [a, b]) {
    assertSigned(t, r, 'job.failed')
    t.equal(r.json.type, 'job.failed')
    t.equal(r.json.data.job.id, jobId)
    t.equal(r.json.data.job.status, 'failed')
    t.type(r.json.data.job.error_message, 'string')
  }
  // The outbox rows are written in the job's terminal transaction, which committed before
  // anything above was sent: no row now means nothing will ever be sent there.
  t.equal((await deliveries(s, u, quietId)).body.total, 0, 'no outbox row for a webhook not subscribed to the event')
  t.equal(rx.received.filter(x => x.path === onlyCompleted.path).length, 0)
})

t.test('a receiver answering 500 first sees the retry with the same X-Service-Delivery; the history shows every attempt', async t => {
  const u = await createUser(s)
  const dest = destination('retry', [500, 503])
  const hookId = await register(s, u, dest)
  await imageJob(s, u, 'a paper boat')
  const got = await rx.waitFor(dest.path, 3)
  t.same(got.map(r => r.answered), [500, 503, 200])
  t.equal(new Set(got.map(r => r.deliveryId)).size, 1, 'one delivery id across retries')
  t.equal(new Set(got.map(r => r.body)).size, 1, 'the same body bytes on every attempt')
  for (const r of got) assertSigned(t, r, 'job.completed')
  const r = await until('delivered after retries', async () => {
    const d = await deliveries(s, u, hookId)
    return d.body.data[0]?.status === 'delivered' ? d : null
  })
  const d = r.body.data[0]
  t.equal(d.attempts, 3)
  t.equal(d.last_status_code, 200)
  t.same(d.attempts_history.map((a: any) => [a.attempt, a.status_code]), [[1, 500], [2, 503], [3, 200]])
  t.match(d.attempts_history[0].error, /^HTTP 500: receiver says 500/)
  t.equal(d.attempts_history[2].error, null)
  t.ok(Date.parse(d.attempts_history[1].attempted_at) >= Date.parse(d.attempts_history[0].attempted_at) + 5, 'the retry waited (5 s scaled by WEBHOOK_RETRY_SCALE)')
})

t.test('410 disables the registered webhook and its pending deliveries; later events are not sent to it', async t => {
  const u = await createUser(s)
  const gone = destination('gone', [410])
  const hookId = await register(s, u, gone)
  await imageJob(s, u, 'a snowy owl')
  const [first] = await rx.waitFor(gone.path, 1)
  t.equal(first.answered, 410)
  const hook = await until('webhook deactivated', async () => {
    const l = await s.req('GET', '/v1/webhooks', { key: u.key })
    return l.body.data.find((w: any) => w.id === hookId && w.active === false)
  })
  t.equal(hook.active, false)
  const d = (await deliveries(s, u, hookId)).body.data[0]
  t.equal(d.status, 'disabled')
  t.equal(d.last_status_code, 410)
  t.equal(d.attempts, 1, 'no retry after 410')

  const later = await imageJob(s, u, 'another snowy owl')
  await jobDone(s, u, later)
  // The terminal transaction (committed: the job reads terminal) wrote whatever outbox rows
  // the event has: no new row for the disabled webhook means nothing more will be sent to it.
  t.equal((await deliveries(s, u, hookId)).body.total, 1, 'no new outbox row for it')
  t.equal(rx.received.filter(x => x.path === gone.path).length, 1, 'nothing more is sent to a disabled webhook')
  const [{ reason }] = await s.app.services.sql<any[]>`SELECT disabled_reason AS reason FROM webhooks WHERE id = ${hookId}`
  t.match(reason, /410/)

  const ownGone = destination('own-gone', [410])
  const jobId = await imageJob(s, u, 'a third owl', ownGone)
  await rx.waitFor(ownGone.path, 1)
  const row = await until('per-job delivery disabled', async () => {
    const [x] = await s.app.services.sql<any[]>`SELECT status, attempts FROM webhook_deliveries WHERE job_id = ${jobId} AND webhook_id IS NULL`
    return x?.status === 'disabled' ? x : null
  })
  t.equal(row.attempts, 1, 'a per-job URL answering 410 is not retried')
})

t.test('deleting a webhook disables its pending deliveries', async t => {
  const u = await createUser(s)
  const dest = destination('deleted', [500, 500, 500, 500, 500, 500, 500, 500])
  const hookId = await register(s, u, dest)
  await imageJob(s, u, 'a kite')
  await rx.waitFor(dest.path, 2)
  t.equal((await s.req('DELETE', `/v1/webhooks/${hookId}`, { key: u.key })).status, 200)
  const [row] = await s.app.services.sql<any[]>`SELECT status, last_error FROM webhook_deliveries WHERE webhook_id = ${hookId}`
  t.equal(row.status, 'disabled')
  const seen = rx.received.filter(x => x.path === dest.path).length
  await sleep(1000) // time: proves no retry follows the delete within a window of many retry intervals
  t.ok(rx.received.filter(x => x.path === dest.path).length <= seen + 1, 'at most the attempt already in flight is sent after the delete')
})

const hostsName = await privateHostsName()

t.test('the delivery-time SSRF check refuses destinations that are not public, whatever the outbox row says', async t => {
  // Rows written straight into the outbox stand for URLs that passed an older rule, or names
  // whose DNS answer changed after registration (rebinding).
  const u = await createUser(s)
  const jobId = await imageJob(s, u, 'a lantern')
  await jobDone(s, u, jobId)
  const sql = s.app.services.sql
  const rows: Array<[string, string]> = [
    ['literal', `https://127.0.0.1:${s.app.port}/v1/health`],
    ['private', 'https://10.0.0.1/hook'],
    ['metadata', 'https://169.254.169.254/latest/meta-data/'],
    ['v6', `https://[::1]:${s.app.port}/`],
    ['plain-http', 'http://example.com/hook'],
  ]
  if (hostsName) rows.push(['rebind', `https://${hostsName}:${rx.port}/ssrf`])
  for (const [name, url] of rows) {
    await sql`INSERT INTO webhook_deliveries (id, event_id, account_id, job_id, event, url, secret, body)
      VALUES (${'dlv_ssrf_' + name}, 'evt_ssrf', ${u.id}, ${jobId}, 'job.completed', ${url}, 'ssrf-secret-0123456789', '{}')`
  }
  const results = await until('every SSRF row attempted', async () => {
    const r = await sql<any[]>`SELECT id, status, attempts, last_error, last_status_code FROM webhook_deliveries WHERE id LIKE 'dlv_ssrf_%' ORDER BY id`
    return r.every(x => x.attempts >= 1) ? r : null
  })
  const by = Object.fromEntries(results.map(r => [r.id.slice('dlv_ssrf_'.length), r]))
  for (const name of ['literal', 'private', 'metadata', 'v6', 'plain-http']) {
    t.equal(by[name].status, 'failed', `${name}: a URL that can never pass fails at once`)
    t.equal(by[name].attempts, 1)
    t.equal(by[name].last_status_code, null)
  }
  t.match(by.literal.last_error, /refused: 127\.0\.0\.1 is a loopback address/)
  t.match(by.private.last_error, /private address/)
  t.match(by.metadata.last_error, /metadata address/)
  t.match(by.v6.last_error, /loopback/)
  t.match(by['plain-http'].last_error, /https/)
  if (hostsName) {
    t.equal(by.rebind.status, 'pending', 'a name resolving to a private address is retried (DNS can change back)')
    t.match(by.rebind.last_error, new RegExp(`refused: ${hostsName.replace(/\./g, '\\.')} resolves to .*address`))
    t.equal(rx.received.filter(x => x.path === '/ssrf').length, 0, 'the receiver behind the private address was never reached')
  } else {
    t.comment('no private name in /etc/hosts: the rebinding case is covered in test/webhooks/delivery.test.ts')
  }
  const [{ n }] = await sql<any[]>`SELECT count(*)::int AS n FROM webhook_attempts WHERE delivery_id LIKE 'dlv_ssrf_%'`
  t.ok(n >= rows.length, 'every refusal is recorded as an attempt')
})

/** A second service on an existing database (another node, or the same one restarted). */
async function startOn (databaseUrl: string): Promise<{ app: App; dataDir: string }> {
  const dataDir = await mkdtemp(join(tmpdir(), 'gjt-data-'))
  const config = loadConfig({
    PORT: '0', HOST: '127.0.0.1', DATABASE_URL: databaseUrl, ADMIN_TOKEN, JWT_SECRET, SHARDS: '1', LOG_LEVEL: 'silent', DATA_DIR: dataDir, ...ENV,
  })
  return { app: await createApp(config, { logger: pino({ level: 'silent' }) }), dataDir }
}

t.test('stopping the server with a delivery failed once and a retry in flight: another server on the same database delivers it, same X-Service-Delivery', async t => {
  const s2 = await startServer(t, ENV)
  const u = await createUser(s2)
  // The receiver fails the first attempt and never answers the second: the server is stopped
  // with that request in flight (its claim is released after the grace period, not recorded).
  const down = destination('down', [503, 'hang'])
  const jobId = await imageJob(s2, u, 'a windmill', down)
  await rx.waitFor(down.path, 2)
  await s2.app.close()
  rx.route(down.path, down.secret) // the receiver is healthy again: 200 from now on
  const db = postgres(s2.databaseUrl, { max: 1, onnotice: () => {} })
  t.teardown(() => db.end())
  const [row] = await db`SELECT status, attempts, claimed_until FROM webhook_deliveries WHERE job_id = ${jobId}`
  t.same(row, { status: 'pending', attempts: 1, claimed_until: null }, 'pending, one recorded attempt, claim released by the graceful stop')

  const next = await startOn(s2.databaseUrl)
  try {
    const got = await rx.waitFor(down.path, 3)
    t.same(got.map(r => r.answered), [503, null, 200], 'failed, abandoned in flight, then delivered')
    t.equal(new Set(got.map(r => r.deliveryId)).size, 1, 'the restarted service sends the same delivery id')
    const done = await until('delivered by the new server', async () => {
      const [r] = await db`SELECT status, attempts FROM webhook_deliveries WHERE job_id = ${jobId}`
      return r.status === 'delivered' ? r : null
    })
    t.equal(done.attempts, 2, 'the abandoned request is not counted as an attempt')
  } finally {
    await next.app.close()
    await rm(next.dataDir, { recursive: true, force: true })
  }
})

t.test('kill -9 between sending and recording: after the claim lease runs out another server redelivers with the same X-Service-Delivery', async t => {
  const databaseUrl = await freshDatabase(t)
  const dataDir = await mkdtemp(join(tmpdir(), 'gjt-data-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const main = fileURLToPath(new URL('../../src/main.js', import.meta.url))
  const child = spawn(process.execPath, [main], {
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', DATABASE_URL: databaseUrl, ADMIN_TOKEN, JWT_SECRET, SHARDS: '1', LOG_LEVEL: 'silent', DATA_DIR: dataDir, ...ENV },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const exited = new Promise<void>(resolve => child.once('exit', () => resolve()))
  t.teardown(async () => { child.kill('SIGKILL'); await exited })
  const port = await new Promise<number>((resolve, reject) => {
    let out = ''
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString()
      const m = /listening on .* \(port (\d+)\)/.exec(out)
      if (m) resolve(Number(m[1]))
    })
    child.once('exit', (code) => reject(new Error(`server exited early (${code}): ${out}`)))
  })
  const url = `http://127.0.0.1:${port}`
  const remote = {
    req: async (method: string, path: string, o: { body?: unknown; key?: string; jwt?: string; admin?: boolean } = {}): Promise<Res> => {
      const headers: Record<string, string> = {}
      if (o.key) headers['x-api-key'] = o.key
      if (o.jwt) headers.authorization = `Bearer ${o.jwt}`
      if (o.admin) headers.authorization = `Bearer ${ADMIN_TOKEN}`
      if (o.body !== undefined) headers['content-type'] = 'application/json'
      const r = await fetch(url + path, { method, headers, body: o.body === undefined ? undefined : JSON.stringify(o.body) })
      const text = await r.text()
      let body: unknown = text
      try { body = JSON.parse(text) } catch {}
      return { status: r.status, headers: r.headers, body, text }
    },
  } as unknown as TestServer
  const u = await createUser(remote)
  const dest = destination('kill', ['hang'])
  const jobId = await imageJob(remote, u, 'a lighthouse at dusk', dest)
  const [first] = await rx.waitFor(dest.path, 1)
  child.kill('SIGKILL') // the receiver has the request; the sender dies before it can record anything
  await exited

  const db = postgres(databaseUrl, { max: 1, onnotice: () => {} })
  t.teardown(() => db.end())
  const [leased] = await db`SELECT status, attempts, claimed_until > now() AS leased FROM webhook_deliveries WHERE job_id = ${jobId}`
  t.same(leased, { status: 'pending', attempts: 0, leased: true }, 'nothing recorded; the claim is still leased')

  const next = await startOn(databaseUrl)
  try {
    await sleep(600) // time: proves the new server leaves a leased row alone for a window of several outbox polls
    t.equal(rx.received.filter(x => x.path === dest.path).length, 1, 'a live lease keeps other servers off the row')
    await db`UPDATE webhook_deliveries SET claimed_until = now() - interval '1 second' WHERE job_id = ${jobId}` // the 60 s lease runs out
    const got = await rx.waitFor(dest.path, 2)
    t.equal(got[1].deliveryId, first.deliveryId, 'redelivered with the same X-Service-Delivery (receivers dedupe on it)')
    t.equal(got[1].body, first.body, 'and the same body')
    t.equal(got[1].answered, 200)
    const done = await until('delivered after the crash', async () => {
      const [r] = await db`SELECT status, attempts FROM webhook_deliveries WHERE job_id = ${jobId}`
      return r.status === 'delivered' ? r : null
    })
    t.equal(done.attempts, 1, 'the lost attempt was never recorded: at-least-once')
  } finally {
    await next.app.close()
    await rm(next.dataDir, { recursive: true, force: true })
  }
})

t.test('the receiver fixture rejects a valid HMAC whose timestamp is older than 300 s', async t => {
  const dest = destination('old')
  const body = '{"id":"evt_x"}'
  const { createHmac } = await import('node:crypto')
  const old = Math.floor(Date.now() / 1000) - 301
  const sig = `t=${old},sha256=${createHmac('sha256', dest.secret).update(`${old}.${body}`).digest('hex')}`
  const r = await fetch(dest.url, { method: 'POST', body, headers: { 'content-type': 'application/json', 'x-service-signature': sig } })
  t.equal(r.status, 401)
  t.equal(await r.text(), 'timestamp older than 300 s')
  const fresh = Math.floor(Date.now() / 1000)
  const ok = await fetch(dest.url, { method: 'POST', body, headers: { 'x-service-signature': `t=${fresh},sha256=${createHmac('sha256', dest.secret).update(`${fresh}.${body}`).digest('hex')}` } })
  t.equal(ok.status, 200)
})
