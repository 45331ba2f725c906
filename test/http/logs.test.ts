// Logs: the real service as `npm start` runs it (a child process, so the shard and
// delivery workers' output is captured too) writes one pino line per request carrying the id
// also sent as X-Request-Id, and no secret of any kind reaches its output: API keys, session
// JWTs, webhook secrets, passwords, SSE tickets, ADMIN_TOKEN, JWT_SECRET, METRICS_TOKEN and the
// provider tokens (FAL_KEY, REPLICATE_API_TOKEN, KIE_API_KEY).
import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { createLogger, scrub } from '../../src/log.js'
import { freshDatabase } from '../helpers/db.js'
import { waitFor } from '../helpers/wait.js'

const ADMIN_TOKEN = 'admin-token-for-logs-test-0123456789abcdef'
const JWT_SECRET = 'jwt-secret-for-logs-test-0123456789abcdefghij'
const METRICS_TOKEN = 'metrics-token-for-logs-test-0123456789'
const PROVIDER_TOKENS = { FAL_KEY: 'fal-key-secret-0123456789abcdef', REPLICATE_API_TOKEN: 'r8_replicate-secret-0123456789abc', KIE_API_KEY: 'kie-api-key-secret-0123456789ab', REPLICATE_WEBHOOK_SECRET: 'whsec_cmVwbGljYXRlLXdlYmhvb2stc2VjcmV0', KIE_WEBHOOK_HMAC_KEY: 'kie-hmac-key-secret-0123456789ab' }
const PASSWORD = 'password-secret-0123456789'
const WEBHOOK_SECRET = 'webhook-secret-0123456789abcdef'
const JOB_WEBHOOK_SECRET = 'job-webhook-secret-0123456789ab'

t.test('the logger redacts credential fields and scrubs secrets from error text', async t => {
  const lines: string[] = []
  const sink = new Writable({ write (chunk, _enc, cb) { lines.push(String(chunk)); cb() } })
  const log = createLogger('info', { destination: sink, secrets: [ADMIN_TOKEN] })
  const key = 'gjs_sk_' + 'ab'.repeat(32)
  log.info({ headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'x-api-key': key }, body: { password: PASSWORD, webhook_secret: WEBHOOK_SECRET, secret: WEBHOOK_SECRET }, config: { adminToken: ADMIN_TOKEN, jwtSecret: JWT_SECRET }, fal: { key: PROVIDER_TOKENS.FAL_KEY, queueUrl: 'https://queue.example' }, replicate: { token: PROVIDER_TOKENS.REPLICATE_API_TOKEN, webhookSecret: PROVIDER_TOKENS.REPLICATE_WEBHOOK_SECRET }, kie: { apiKey: PROVIDER_TOKENS.KIE_API_KEY, hmacKey: PROVIDER_TOKENS.KIE_WEBHOOK_HMAC_KEY } }, 'fields')
  log.error({ err: new Error(`upstream said no to ${key} with token ${ADMIN_TOKEN} and eyJhbGciOi.eyJzdWIiOiIxIn0.c2lnbmF0dXJl`) }, 'an error')
  const out = lines.join('')
  for (const s of [ADMIN_TOKEN, JWT_SECRET, key, PASSWORD, WEBHOOK_SECRET, 'eyJhbGciOi.eyJzdWIiOiIxIn0']) t.notOk(out.includes(s), `${s.slice(0, 12)}... not in the output`)
  const [fields, error] = lines.map(l => JSON.parse(l))
  t.same(fields.headers, { authorization: '[Redacted]', 'x-api-key': '[Redacted]' })
  t.same(fields.body, { password: '[Redacted]', webhook_secret: '[Redacted]', secret: '[Redacted]' })
  t.same(fields.config, { adminToken: '[Redacted]', jwtSecret: '[Redacted]' })
  t.same(fields.fal, { key: '[Redacted]', queueUrl: 'https://queue.example' }, 'provider adapter configs: only the secrets go')
  t.same(fields.replicate, { token: '[Redacted]', webhookSecret: '[Redacted]' })
  t.same(fields.kie, { apiKey: '[Redacted]', hmacKey: '[Redacted]' })
  t.equal(error.err.message, 'upstream said no to [Redacted] with token [Redacted] and [Redacted]', 'the error message keeps its text, not its secrets')
  t.equal(scrub('plain text'), 'plain text', 'text without secrets is unchanged')
})

t.test('a running service logs one line per request with its X-Request-Id and never a secret', async t => {
  const databaseUrl = await freshDatabase(t)
  const dataDir = await mkdtemp(join(tmpdir(), 'gjt-logs-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const main = fileURLToPath(new URL('../../src/main.js', import.meta.url))
  const child = spawn(process.execPath, [main], {
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', DATABASE_URL: databaseUrl, ADMIN_TOKEN, JWT_SECRET, METRICS_TOKEN, ...PROVIDER_TOKENS, LOG_LEVEL: 'debug', DATA_DIR: dataDir, SHARDS: '1', SIM_SPEED: '200', WEBHOOK_RETRY_SCALE: '0.001', PUBLIC_BASE_URL: 'http://localhost:1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  child.stdout.on('data', (d) => { out += String(d) })
  child.stderr.on('data', (d) => { out += String(d) })
  const exited = new Promise<number | null>(resolve => child.on('exit', resolve))
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line: ${out}`)), 30000)
    const check = () => { const m = /\(port (\d+)\)/.exec(out); if (m) { clearTimeout(timer); resolve(Number(m[1])) } }
    child.stdout.on('data', check)
    check()
  })
  const base = `http://127.0.0.1:${port}`
  const ids: string[] = []
  const call = async (method: string, path: string, headers: Record<string, string> = {}, body?: unknown) => {
    const r = await fetch(base + path, { method, headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
    const id = r.headers.get('x-request-id')
    t.ok(id, `${method} ${path.split('?')[0]} answers X-Request-Id`)
    ids.push(id!)
    const text = await r.text()
    try { return { status: r.status, body: JSON.parse(text) } } catch { return { status: r.status, body: text } }
  }

  const email = `logs${process.pid}@example.com`
  const acct = await call('POST', '/v1/admin/accounts', { authorization: `Bearer ${ADMIN_TOKEN}` }, { email, password: PASSWORD, verified: true, credits: 500 })
  t.equal(acct.status, 201)
  const login = await call('POST', '/v1/auth/login', {}, { email, password: PASSWORD })
  t.equal(login.status, 200)
  const jwt = login.body.token as string
  const wrongLogin = await call('POST', '/v1/auth/login', {}, { email, password: PASSWORD + 'x' })
  t.equal(wrongLogin.status, 401)
  const created = await call('POST', '/v1/auth/keys', { authorization: `Bearer ${jwt}` }, { name: 'logs' })
  t.equal(created.status, 201)
  const key = created.body.key as string
  const rotated = await call('POST', `/v1/auth/keys/${created.body.id}/rotate`, { authorization: `Bearer ${jwt}` })
  t.equal(rotated.status, 200)
  const key2 = rotated.body.key as string
  const unknownKey = 'gjs_sk_' + 'cd'.repeat(32)
  t.equal((await call('GET', '/v1/credits', { 'x-api-key': key2 })).status, 200)
  t.equal((await call('GET', '/v1/credits', { authorization: `Bearer ${key2}` })).status, 200)
  t.equal((await call('GET', '/v1/credits', { 'x-api-key': key })).status, 401, 'the rotated-away key is refused')
  t.equal((await call('GET', '/v1/credits', { 'x-api-key': unknownKey })).status, 401)
  t.equal((await call('GET', `/v1/credits?api_key=${key2}`)).status, 401, 'a key in the query string is refused')
  t.equal((await call('GET', '/v1/credits', { authorization: `Bearer ${jwt}x` })).status, 401, 'a tampered JWT is refused')
  t.equal((await call('GET', '/v1/admin/accounts/1', { authorization: `Bearer ${ADMIN_TOKEN}x` })).status, 401)
  t.equal((await call('GET', '/metrics', { authorization: `Bearer ${METRICS_TOKEN}` })).status, 200)
  const hook = await call('POST', '/v1/webhooks', { 'x-api-key': key2 }, { url: 'https://hooks.example.com/x', events: ['job.completed'], secret: WEBHOOK_SECRET })
  t.equal(hook.status, 201)
  const job = await call('POST', '/v1/generate/image', { 'x-api-key': key2 }, { model: 'nano-banana', prompt: 'a red apple', webhook_url: 'https://hooks.example.com/job', webhook_secret: JOB_WEBHOOK_SECRET })
  t.equal(job.status, 201)
  const genSecretJob = await call('POST', '/v1/generate/image', { 'x-api-key': key2 }, { model: 'nano-banana', prompt: 'a green apple', webhook_url: 'https://hooks.example.com/job2' })
  t.equal(genSecretJob.status, 201)
  const generatedSecret = genSecretJob.body.webhook_secret as string
  const ticket = await call('POST', '/v1/sse/tickets', { 'x-api-key': key2 }, { jobId: job.body.id })
  t.equal(ticket.status, 200)
  const sse = await call('GET', `/v1/sse/jobs/${job.body.id}?ticket=${encodeURIComponent(ticket.body.ticket)}`)
  t.equal(sse.status, 200, 'the SSE stream ran to its end (the job completed)')
  const pw = await call('POST', '/v1/auth/password', { authorization: `Bearer ${jwt}` }, { current_password: PASSWORD, new_password: PASSWORD + '-new' })
  t.equal(pw.status, 200)
  const jwt2 = pw.body.token as string

  // Let the webhook deliveries fail (the hosts do not resolve here) and be logged, then stop:
  // the registered webhook gets both jobs' job.completed, each job its own URL's.
  const failedDeliveries = () => new Set(out.split('\n').filter(l => l.includes('"webhook attempt failed"')).map(l => JSON.parse(l).delivery)).size
  await waitFor(() => failedDeliveries() >= 4, { what: () => `four webhook deliveries to log a failed attempt (${failedDeliveries()} so far)`, timeoutMs: 15_000, everyMs: 25 })
  child.kill('SIGTERM')
  t.equal(await exited, 0, 'the service drained and exited 0')

  const secrets: Record<string, string> = {
    ADMIN_TOKEN, JWT_SECRET, METRICS_TOKEN, ...PROVIDER_TOKENS, password: PASSWORD, webhook_secret: WEBHOOK_SECRET,
    job_webhook_secret: JOB_WEBHOOK_SECRET, generated_webhook_secret: generatedSecret,
    api_key: key, rotated_api_key: key2, unknown_api_key: unknownKey, jwt, new_jwt: jwt2, sse_ticket: ticket.body.ticket, signup_hash_of_nothing: 'correct horse',
  }
  for (const [name, value] of Object.entries(secrets)) t.notOk(out.includes(value), `${name} appears nowhere in the log output`)

  const requestLines = out.split('\n').filter(l => l.startsWith('{')).map(l => JSON.parse(l)).filter(l => l.msg === 'request')
  t.equal(requestLines.length, ids.length, 'one request line per request')
  t.same(requestLines.map(l => l.reqId).sort(), [...ids].sort(), 'each line carries the X-Request-Id its answer sent')
  for (const l of requestLines) {
    t.notOk(String(l.url).includes('?'), 'request lines log the path without the query string')
    t.type(l.status, 'number')
    t.type(l.ms, 'number')
  }
  const given = await fetch(base + '/v1/health').catch(() => null)
  t.equal(given, null, 'the service is stopped')
})
