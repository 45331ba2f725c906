// The real process as an operator runs it (docs/operations.md "Running in production"): a configuration
// mistake is one line on stderr and exit 1 before anything starts; SIGTERM or SIGINT to the
// `npm start` process (what Docker, Kubernetes and systemd signal) stops the server it started.
import t from 'tap'
import { spawn, execFileSync } from 'node:child_process'
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { createServer, connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freshDatabase } from './helpers/db.js'
import { settled } from './helpers/wait.js'

const ROOT = process.cwd()

async function freePort (): Promise<number> {
  return new Promise((resolve) => { const s = createServer(); s.listen(0, '127.0.0.1', () => { const p = (s.address() as any).port; s.close(() => resolve(p)) }) })
}

function baseEnv (extra: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = { ...process.env as Record<string, string>, HOST: '127.0.0.1', LOG_LEVEL: 'warn', SHARDS: '1', ...extra }
  for (const k of ['ADMIN_TOKEN', 'JWT_SECRET', 'REDIS_URL', 'PROVIDERS_FILE', 'TIER_LIMITS']) if (!(k in extra)) delete env[k]
  return env
}

/** Runs `node dist/src/main.js` to its exit (a config mistake never gets far). */
function runMain (env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['dist/src/main.js'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => { stdout += d })
    child.stderr.on('data', (d) => { stderr += d })
    child.on('exit', (code) => resolve({ code, stdout, stderr }))
  })
}

t.test('a configuration mistake prints one line naming it and exits 1, before the embedded PostgreSQL starts', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'gjt-boot-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const unknownProvider = join(dir, 'unknown-provider.json')
  await writeFile(unknownProvider, JSON.stringify({ routes: { 'veo3-fast': [{ provider: 'runway', model: 'x' }] } }))
  const needsKey = join(dir, 'needs-key.json')
  await writeFile(needsKey, JSON.stringify({ routes: { 'veo3-fast': [{ provider: 'fal', model: 'fal-ai/veo3/fast' }] } }))
  const badBudget = join(dir, 'bad-budget.json')
  await writeFile(badBudget, JSON.stringify({ providers: { fal: { requests_per_second: 0 } }, routes: { 'veo3-fast': [{ provider: 'simulated' }] } }))
  const cases: Array<[string, Record<string, string>, RegExp]> = [
    ['TIER_LIMITS unknown key', { TIER_LIMITS: '{"free":{"rpn":5}}' }, /^genjobs: configuration error: TIER_LIMITS\.free: unknown key "rpn" \(allowed: rpm, max_concurrent, max_streams\)$/],
    ['TIER_LIMITS unknown tier', { TIER_LIMITS: '{"gold":{"rpm":5}}' }, /TIER_LIMITS: unknown tier "gold" \(allowed: free, pro, enterprise, session\)/],
    ['routing file names an unknown provider', { PROVIDERS_FILE: unknownProvider }, /PROVIDERS_FILE .*unknown-provider\.json: routes\.veo3-fast\[0\]: unknown provider "runway" \(one of simulated, fal, replicate, kie\)/],
    ['a missing credential', { PROVIDERS_FILE: needsKey }, /routes\.veo3-fast\[0\]: provider fal needs FAL_KEY in the environment/],
    ['a request budget that is not a rate', { PROVIDERS_FILE: badBudget }, /PROVIDERS_FILE .*bad-budget\.json: providers\.fal\.requests_per_second must be a number > 0 \(at most 100000\), got 0/],
    ['a routing file that is not there', { PROVIDERS_FILE: join(dir, 'nope.json') }, /PROVIDERS_FILE: cannot read .*nope\.json/],
    ['a bad number', { PORT: 'eighty' }, /PORT must be a number >= 0, got "eighty"/],
  ]
  for (const [name, extra, re] of cases) {
    const dataDir = join(dir, name.replace(/\W+/g, '-'))
    const env = baseEnv({ PORT: '0', DATA_DIR: dataDir, ...extra })
    delete env.DATABASE_URL // embedded PostgreSQL: must not be started for a bad configuration
    for (const k of ['FAL_KEY', 'REPLICATE_API_TOKEN', 'KIE_API_KEY']) delete env[k]
    const began = Date.now()
    const r = await runMain(env)
    t.equal(r.code, 1, `${name}: exit 1`)
    const lines = r.stderr.split('\n').filter(Boolean)
    t.equal(lines.length, 1, `${name}: one line (${JSON.stringify(r.stderr)})`)
    t.match(lines[0], re, name)
    t.notMatch(r.stderr, /\n\s+at /, `${name}: no stack trace`)
    t.equal(r.stdout, '', `${name}: nothing else printed`)
    t.equal(await readdir(dataDir).catch(() => 'absent'), 'absent', `${name}: nothing started (DATA_DIR untouched)`)
    t.ok(Date.now() - began < 10_000, `${name}: answered in ${Date.now() - began} ms`)
  }
})

function portOpen (port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1')
    s.once('connect', () => { s.destroy(); resolve(true) })
    s.once('error', () => resolve(false))
  })
}

function alive (pid: number): boolean {
  try { process.kill(pid, 0); return true } catch { return false }
}

/** Every descendant of `pid` (ps reads /proc; the test must see grandchildren too). */
function descendants (pid: number): number[] {
  const rows = execFileSync('ps', ['-e', '-o', 'pid=,ppid='], { encoding: 'utf8' }).trim().split('\n').map(l => l.trim().split(/\s+/).map(Number))
  const out: number[] = []
  const walk = (p: number) => { for (const [c, pp] of rows) if (pp === p) { out.push(c); walk(c) } }
  walk(pid)
  return out
}

for (const signal of ['SIGTERM', 'SIGINT', 'SIGKILL'] as const) {
  const title = signal === 'SIGKILL'
    ? 'SIGKILL to the npm process of `npm start`: the server notices its parent is gone, drains and exits; no process is left'
    : `${signal} to the npm process of \`npm start\` drains and stops the server: npm exits 0, the port closes, no process is left`
  t.test(title, { timeout: 120_000 }, async (t) => {
    const port = await freePort()
    const dataDir = await mkdtemp(join(tmpdir(), 'gjt-npm-'))
    t.teardown(() => rm(dataDir, { recursive: true, force: true }))
    const env = baseEnv({ PORT: String(port), DATA_DIR: dataDir, DATABASE_URL: await freshDatabase(t) })
    // Not in its own group: a terminal's Ctrl-C would signal npm and the server together; here only npm is signalled.
    const npm = spawn('npm', ['start'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    npm.stdout.on('data', (d) => { out += d })
    npm.stderr.on('data', (d) => { out += d })
    const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => npm.on('exit', (code, sig) => resolve({ code, signal: sig })))
    let leftover: number[] = []
    t.teardown(() => { for (const p of leftover) if (alive(p)) process.kill(p, 'SIGKILL') })
    const deadline = Date.now() + 60_000
    while (!out.includes('genjobs listening')) {
      if (Date.now() > deadline || npm.exitCode !== null) throw new Error('npm start did not come up: ' + out)
      await Promise.race([new Promise<void>((resolve) => npm.stdout.once('data', () => resolve())), exited])
    }
    t.ok(await portOpen(port), 'serving')
    leftover = descendants(npm.pid!)
    t.ok(leftover.length >= 1, `npm started the server (${leftover.join(', ')})`)
    npm.kill(signal)
    const r = await exited
    if (signal === 'SIGKILL') {
      // Nobody forwards anything: the server's own parent watch must stop it.
      await settled(() => leftover.some(alive), some => !some, { timeoutMs: 30_000, everyMs: 100 })
    } else {
      t.same(r, { code: 0, signal: null }, `npm exits 0 after the server drained (${out.split('\n').slice(-3).join(' | ')})`)
    }
    t.same(leftover.filter(alive), [], 'no process npm started is left')
    t.notOk(await portOpen(port), 'the port is closed')
  })
}
