// scripts/patch-postgres.mjs (run by `prepare`): it patches the pinned driver, is idempotent, and
// fails the install loudly when the driver is another version or its text no longer matches.
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const repo = process.cwd()
const pristine = join(repo, 'node_modules/postgres')

/** A throwaway tree: scripts/patch-postgres.mjs beside a copy of the driver, its text unpatched. */
function tree (edit: (dir: string) => void = () => {}): string {
  const dir = mkdtempSync(join(tmpdir(), 'gjt-patchpg-'))
  mkdirSync(join(dir, 'scripts'))
  cpSync(join(repo, 'scripts/patch-postgres.mjs'), join(dir, 'scripts/patch-postgres.mjs'))
  cpSync(pristine, join(dir, 'node_modules/postgres'), { recursive: true })
  for (const rel of ['src/connection.js', 'cjs/src/connection.js', 'cf/src/connection.js']) {
    const f = join(dir, 'node_modules/postgres', rel)
    // Undo the installed patch, as a fresh `npm ci` would have it.
    const text = readFileSync(f, 'utf8')
      .split('    clearImmediate(nextWriteTimer)\n    nextWriteTimer = chunk = null // genjobs patch\n').join('    clearImmediate(nextWriteTimer)\n')
      .split(';(query || sent.length) && error( // genjobs patch\n      ').join('!hadError && (query || sent.length) && error(')
    writeFileSync(f, text)
  }
  edit(dir)
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}
const run = (dir: string) => spawnSync(process.execPath, [join(dir, 'scripts/patch-postgres.mjs')], { encoding: 'utf8' })

t.test('the pinned version is patched, once', async (t) => {
  const dir = tree()
  const first = run(dir)
  t.equal(first.status, 0, first.stderr)
  t.match(first.stdout, /src\/connection\.js patched/)
  t.match(readFileSync(join(dir, 'node_modules/postgres/src/connection.js'), 'utf8'), /nextWriteTimer = chunk = null \/\/ genjobs patch/)
  const again = run(dir)
  t.equal(again.status, 0)
  t.notMatch(again.stdout, /patched/, 'idempotent')
})

t.test('another driver version fails the install with what to do', async (t) => {
  const dir = tree((d) => {
    const p = join(d, 'node_modules/postgres/package.json')
    writeFileSync(p, JSON.stringify({ ...JSON.parse(readFileSync(p, 'utf8')), version: '3.5.0' }))
  })
  const r = run(dir)
  t.equal(r.status, 1)
  t.match(r.stderr, /node_modules\/postgres is 3\.5\.0, not 3\.4\.9.*update MENDS and PATCHED_FOR/s)
})

t.test('a driver whose text no longer matches fails the install', async (t) => {
  const dir = tree((d) => {
    const f = join(d, 'node_modules/postgres/src/connection.js')
    writeFileSync(f, readFileSync(f, 'utf8').split('clearImmediate(nextWriteTimer)').join('clearImmediate(nextWriteTimer) ;'))
  })
  const r = run(dir)
  t.equal(r.status, 1)
  t.match(r.stderr, /src\/connection\.js does not contain the text a mend replaces/)
})
