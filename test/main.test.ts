import t from 'tap'
import { spawn } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { waitFor } from './helpers/wait.js'

/** `npm start` as an operator runs it on a machine without PostgreSQL: embedded database, generated admin token, clean SIGTERM. */
async function freePort (): Promise<number> {
  return new Promise((resolve) => { const s = createServer(); s.listen(0, '127.0.0.1', () => { const p = (s.address() as any).port; s.close(() => resolve(p)) }) })
}

t.test('without DATABASE_URL the service starts an embedded PostgreSQL, prints a generated admin token once, serves, and exits 0 on SIGTERM', { timeout: 240_000 }, async (t) => {
  const dataDir = await mkdtemp(join(tmpdir(), 'gjt-main-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const port = await freePort()
  const env: Record<string, string> = { ...process.env as Record<string, string>, PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'warn', SHARDS: '1' }
  delete env.DATABASE_URL
  delete env.ADMIN_TOKEN
  delete env.JWT_SECRET
  delete env.REDIS_URL

  const outputs: Array<() => string> = []
  const start = (extra: Record<string, string> = {}) => {
    const child = spawn(process.execPath, ['dist/src/main.js'], { env: { ...env, ...extra }, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (d) => { out += d })
    child.stderr.on('data', (d) => { out += d })
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
    outputs.push(() => out)
    return { child, exited, output: () => out }
  }
  const waitHealthy = () => waitFor(async () => {
    const r = await fetch(`http://127.0.0.1:${port}/v1/health`)
    return r.status === 200 && await r.json() as any
  }, { what: () => 'the service to become healthy; output: ' + outputs.map(f => f()).join('\n---\n'), timeoutMs: 90_000, everyMs: 250 })

  let began = Date.now()
  const first = start()
  const health = await waitHealthy()
  t.comment(`first start (initdb of the embedded PostgreSQL included): ${Date.now() - began} ms`)
  t.equal(health.status, 'ok')
  t.equal(health.checks.database, 'ok')
  const token = (await readFile(join(dataDir, 'admin-token'), 'utf8')).trim()
  t.match(first.output(), token, 'the generated admin token is printed')
  const acct = await fetch(`http://127.0.0.1:${port}/v1/admin/accounts`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify({ email: 'op@example.com', password: 'password123', verified: true }) })
  t.equal(acct.status, 201, 'the printed token works on the operator API')
  first.child.kill('SIGTERM')
  t.equal(await first.exited, 0, 'SIGTERM drains and exits 0')

  // Second start: same data (the account survives), the token is not printed again. Logged at
  // info, so a stop that logs errors (a connection cut by the database stop) is seen.
  began = Date.now()
  const second = start({ LOG_LEVEL: 'info' })
  await waitHealthy()
  const startMs = Date.now() - began
  t.ok(startMs < 15_000, `second start healthy in ${startMs} ms (< 15 s; the machine is shared)`)
  t.notMatch(second.output(), token, 'the admin token is printed only when generated')
  const login = await fetch(`http://127.0.0.1:${port}/v1/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'op@example.com', password: 'password123' }) })
  t.equal(login.status, 200, 'data in DATA_DIR/pg survived the restart')
  second.child.kill('SIGINT')
  t.equal(await second.exited, 0, 'SIGINT exits 0 too')
  const stopLog = second.output().split('\n').filter(l => /terminat|error|"level":(50|60)/i.test(l))
  t.same(stopLog, [], 'a clean stop logs no errors (no connection cut by the database stop)')
  // The embedded server was stopped: its port no longer answers.
  const pgLog = await readFile(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').catch(() => null)
  t.equal(pgLog, null, 'embedded PostgreSQL stopped (no postmaster.pid left)')
})
