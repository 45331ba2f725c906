// containDriverFaults (src/db/connect.ts): during an outage a postgres.js query can
// reject where nobody awaits it any more; that rejection must not end the process (the chaos
// outage scenario saw the main thread exit on CONNECTION_CLOSED), while any other uncaught
// error still does. Each case runs in a child process, since it exercises process-wide hooks.
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const connect = fileURLToPath(new URL('../../src/db/connect.js', import.meta.url))

function run (rejection: string): { status: number | null; stderr: string } {
  const code = `
    const { containDriverFaults } = await import(${JSON.stringify(connect)})
    containDriverFaults((msg) => process.stdout.write('contained: ' + msg + '\\n'))
    Promise.reject(${rejection})`
  // Contained, the child runs to its natural end (exit 0); not contained, it exits 1 at once.
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', code], { encoding: 'utf8', timeout: 20_000 })
  return { status: r.status, stderr: r.stderr + r.stdout }
}

t.test('an unawaited connection error during an outage is contained', async (t) => {
  const r = run(`Object.assign(new Error('write CONNECTION_CLOSED 127.0.0.1:5432'), { code: 'CONNECTION_CLOSED' })`)
  t.equal(r.status, 0, r.stderr)
  t.match(r.stderr, /contained: database error with no waiting caller/)
})

t.test('any other unhandled error still ends the process', async (t) => {
  const r = run(`new Error('a bug of ours')`)
  t.equal(r.status, 1)
  t.match(r.stderr, /uncaught exception: Error: a bug of ours/)
})
