// The operator CLI (`npm run admin -- ...`, docs/api.md "Endpoints"), run as a separate process
// against a running service, as an operator would.
import t from 'tap'
import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ADMIN_TOKEN, startServer } from '../helpers/server.js'

const CLI = fileURLToPath(new URL('../../src/cli/admin.js', import.meta.url))
const s = await startServer(t)
const sql = s.app.services.sql

interface Run { code: number; stdout: string; stderr: string; json: any }

/** Runs the CLI with a clean environment plus `env`. */
function cli (args: string[], env: Record<string, string> = { GENJOBS_URL: s.url, ADMIN_TOKEN }, cwd?: string): Promise<Run> {
  const base: Record<string, string> = {}
  for (const k of ['PATH', 'HOME', 'SYSTEMROOT']) if (process.env[k]) base[k] = process.env[k]!
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...base, ...env }, cwd, timeout: 30_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as any).code === 'number' ? (err as any).code : 1) : 0
      let json: unknown
      try { json = JSON.parse(stdout) } catch {}
      resolve({ code, stdout, stderr, json })
    })
  })
}

let seq = 0
const email = () => `cli_${process.pid}_${++seq}@example.com`

t.test('help (and no command) prints the commands and exits 0', async (t) => {
  for (const args of [['help'], [], ['--help']]) {
    const r = await cli(args)
    t.equal(r.code, 0, `${args.join(' ') || '(none)'}`)
    for (const c of ['create-account', 'purchase', 'grant', 'set', 'asset', 'show', 'GENJOBS_URL', 'ADMIN_TOKEN']) t.match(r.stdout, c)
  }
})

t.test('create-account prints the account; --verified and --credits are passed; credits default 200', async (t) => {
  const e = email()
  const r = await cli(['create-account', '--email', e, '--password', 'cli password 1', '--verified', '--credits', '500'])
  t.equal(r.code, 0, r.stderr)
  t.same(Object.keys(r.json).sort(), ['credits', 'email', 'user_id'])
  t.equal(r.json.email, e)
  t.equal(r.json.credits, 500)
  const [a] = await sql<any[]>`SELECT email_verified, credits FROM accounts WHERE id = ${r.json.user_id}`
  t.equal(a.email_verified, true)
  t.equal(a.credits, 500)

  const d = await cli(['create-account', '--email', email(), '--password', 'cli password 2'])
  t.equal(d.code, 0)
  t.equal(d.json.credits, 200, 'default 200')
  const [b] = await sql<any[]>`SELECT email_verified FROM accounts WHERE id = ${d.json.user_id}`
  t.equal(b.email_verified, false, 'unverified without --verified')

  const login = await s.req('POST', '/v1/auth/login', { body: { email: e, password: 'cli password 1' } })
  t.equal(login.status, 200, 'the account can log in')

  const dup = await cli(['create-account', '--email', e, '--password', 'cli password 1'])
  t.equal(dup.code, 1, 'duplicate email fails')
  t.match(dup.stderr, /already exists/)
  t.match(dup.stderr, /CONFLICT/)
  t.equal(dup.stdout, '')
})

t.test('purchase, grant, set, asset and show drive the operator API', async (t) => {
  const c = await cli(['create-account', '--email', email(), '--password', 'cli password 3', '--verified'])
  const id = String(c.json.user_id)

  const p = await cli(['purchase', id, '--credits', '600', '--currency', 'usd', '--amount', '5'])
  t.equal(p.code, 0, p.stderr)
  t.equal(p.json.credits, 800)
  t.equal(p.json.has_purchased, true)
  t.equal(p.json.tier, 'pro')
  const [pr] = await sql<any[]>`SELECT currency, amount FROM purchases WHERE account_id = ${Number(id)}`
  t.equal(pr.currency, 'USD')
  t.equal(Number(pr.amount), 5)

  const g = await cli(['grant', id, '--credits', '50', '--note', 'from the cli'])
  t.equal(g.code, 0, g.stderr)
  t.equal(g.json.credits, 850)
  t.same(g.json.ledger.by_kind, { grant: 250, purchase: 600 })

  const set = await cli(['set', id, '--banned', 'true', '--verified', 'false', '--credits-locked', 'true', '--enterprise', 'true'])
  t.equal(set.code, 0, set.stderr)
  t.equal(set.json.banned, true)
  t.equal(set.json.email_verified, false)
  t.equal(set.json.credits_locked, true)
  t.equal(set.json.enterprise, true)
  t.equal(set.json.tier, 'enterprise')
  const unset = await cli(['set', id, '--banned', 'false'])
  t.equal(unset.json.banned, false)
  t.equal(unset.json.credits_locked, true, 'other flags unchanged')

  const a = await cli(['asset', id, '--kind', 'voice', '--name', 'Narrator'])
  t.equal(a.code, 0, a.stderr)
  t.equal(a.json.kind, 'voice')
  t.equal(a.json.name, 'Narrator')
  t.type(a.json.id, 'number')

  const show = await cli(['show', id])
  t.equal(show.code, 0)
  t.equal(show.json.user_id, Number(id))
  t.equal(show.json.credits, 850)
  t.same(show.json.ledger, { entries: 3, sum: 850, by_kind: { grant: 250, purchase: 600 } })
})

t.test('failures from the service exit 1 with the envelope message', async (t) => {
  const missing = await cli(['show', '987654321'])
  t.equal(missing.code, 1)
  t.match(missing.stderr, /No account 987654321/)
  t.match(missing.stderr, /NOT_FOUND/)
  t.equal(missing.stdout, '')

  const bad = await cli(['create-account', '--email', 'not-an-email', '--password', 'short'])
  t.equal(bad.code, 1)
  t.match(bad.stderr, /failed validation/)
  t.match(bad.stderr, /\/email/, 'details are printed')

  const wrong = await cli(['show', '1'], { GENJOBS_URL: s.url, ADMIN_TOKEN: 'not-the-token' })
  t.equal(wrong.code, 1)
  t.match(wrong.stderr, /Operator token is wrong/)

  const down = await cli(['show', '1'], { GENJOBS_URL: 'http://127.0.0.1:1', ADMIN_TOKEN })
  t.equal(down.code, 1)
  t.match(down.stderr, /cannot reach the service at http:\/\/127\.0\.0\.1:1/)
})

t.test('bad command lines exit 2 with the usage text and call nothing', async (t) => {
  const cases: Array<[string[], RegExp]> = [
    [['frobnicate'], /unknown command/],
    [['show'], /account ID is required/],
    [['show', 'abc'], /positive integer/],
    [['show', '1', '2'], /unexpected argument/],
    [['purchase', '1'], /--credits is required/],
    [['purchase', '1', '--credits', 'ten'], /--credits must be an integer/],
    [['purchase', '1', '--credits', '0'], /at least 1/],
    [['purchase', '1', '--credits', '5', '--amount', 'five'], /--amount must be a number/],
    [['grant', '1', '--credits', '1.5'], /--credits must be an integer/],
    [['set', '1'], /at least one of/],
    [['set', '1', '--banned', 'yes'], /--banned must be true or false/],
    [['set', '1', '--colour', 'blue'], /Unknown option/],
    [['asset', '1', '--kind', 'prop', '--name', 'x'], /--kind must be character or voice/],
    [['asset', '1', '--kind', 'voice'], /--name is required/],
    [['create-account', '--email', 'a@b.co'], /--password is required/],
    [['create-account', '--email', 'a@b.co', '--password', 'p', '--credits=-1'], /at least 0/],
    [['create-account', '--email', 'a@b.co', '--password', 'p', '--credits', '-1'], /argument is ambiguous/],
  ]
  await s.app.services.metering.flush()
  const [{ n: before }] = await sql<any[]>`SELECT count(*)::int AS n FROM request_log WHERE endpoint LIKE '/v1/admin%'`
  for (const [args, re] of cases) {
    const r = await cli(args)
    t.equal(r.code, 2, args.join(' '))
    t.match(r.stderr, re, args.join(' '))
    t.match(r.stderr, /Usage: npm run admin/)
  }
  await s.app.services.metering.flush()
  const [{ n: after }] = await sql<any[]>`SELECT count(*)::int AS n FROM request_log WHERE endpoint LIKE '/v1/admin%'`
  t.equal(after, before, 'no request reached the service')
})

t.test('the token comes from DATA_DIR/admin-token when ADMIN_TOKEN is unset; PORT sets the default URL', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'gjt-cli-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await writeFile(join(dir, 'admin-token'), ADMIN_TOKEN + '\n')
  const c = await cli(['create-account', '--email', email(), '--password', 'cli password 4'], { GENJOBS_URL: s.url, DATA_DIR: dir })
  t.equal(c.code, 0, c.stderr)
  const byPort = await cli(['show', String(c.json.user_id)], { PORT: String(s.app.port), DATA_DIR: dir })
  t.equal(byPort.code, 0, byPort.stderr)
  t.equal(byPort.json.user_id, c.json.user_id)
  // ./data relative to the working directory is the default DATA_DIR.
  const cwd = await mkdtemp(join(tmpdir(), 'gjt-cli-cwd-'))
  t.teardown(() => rm(cwd, { recursive: true, force: true }))
  const none = await cli(['show', '1'], { GENJOBS_URL: s.url }, cwd)
  t.equal(none.code, 1)
  t.match(none.stderr, /no operator token/)
  t.match(none.stderr, /data\/admin-token/)
  const withSlash = await cli(['show', String(c.json.user_id)], { GENJOBS_URL: `${s.url}/v1/`, ADMIN_TOKEN })
  t.equal(withSlash.code, 0, 'a GENJOBS_URL ending in /v1/ works too')
})
