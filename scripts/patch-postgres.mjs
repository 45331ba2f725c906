// Mends two defects of postgres.js 3.4.x that an outage turns into hung queries or wrong
// answers (docs/decisions.md "postgres.js write-timer patch"; upstream: porsager/postgres #1066,
// #1154, #1208):
// - A connection's small writes wait behind a setImmediate, armed only while `nextWriteTimer` is
//   null. When the socket closes with a write pending, closed() and terminate() cancel that
//   Immediate but leave the variable set (and the dead session's bytes in `chunk`). The pool
//   reuses the connection object, so its next startup message is never flushed: the connection
//   hangs until connect_timeout, again on every reconnect.
// - closed(hadError) fails no query: one sent between the socket's 'error' and its 'close' was
//   left pending, and the next session's first ReadyForQuery resolved it with an empty result.
// It runs from `prepare` (npm ci / npm install) and is idempotent. package.json pins the driver
// to the exact version these mends were reviewed against (PATCHED_FOR); any other version, or a
// text that no longer matches, fails the install with a message saying what to do, so an
// upgrade is never silently left unpatched. Checked by test/db/driver-write-timer.test.ts,
// which fails on the unpatched driver.
import { readFileSync, writeFileSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

// Each mend: the driver's text, what replaces it, and how many times it occurs in 3.4.x.
const MENDS = [
  // Both teardown paths: cancel the pending write AND forget it (and the dead session's bytes).
  { old: '    clearImmediate(nextWriteTimer)\n', new: '    clearImmediate(nextWriteTimer)\n    nextWriteTimer = chunk = null // genjobs patch\n', count: 2 },
  // A query sent between the socket's 'error' and its 'close' (hadError) was never failed: the
  // next session's first ReadyForQuery then resolved it with an empty result.
  { old: "    !hadError && (query || sent.length) && error(", new: "    ;(query || sent.length) && error( // genjobs patch\n      ", count: 1 },
]
const MARK = '// genjobs patch'
/** The postgres.js version the mends above were read against; package.json pins the same. */
const PATCHED_FOR = '3.4.9'

function fail (why) {
  console.error(`patch-postgres: ${why}. The mends in scripts/patch-postgres.mjs were reviewed for postgres.js ${PATCHED_FOR} ` +
    '(docs/decisions.md "postgres.js write-timer patch"): check whether the new version still needs them, update MENDS and PATCHED_FOR, and pin it in package.json.')
  process.exit(1)
}

const root = fileURLToPath(new URL('../node_modules/postgres/', import.meta.url))
if (!existsSync(join(root, 'package.json'))) {
  console.warn('patch-postgres: node_modules/postgres is not installed; nothing to patch')
  process.exit(0)
}

const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version
if (version !== PATCHED_FOR) fail(`node_modules/postgres is ${version}, not ${PATCHED_FOR}`)

for (const rel of ['src/connection.js', 'cjs/src/connection.js', 'cf/src/connection.js']) {
  const file = join(root, rel)
  if (!existsSync(file)) fail(`${rel} is missing`)
  let text = readFileSync(file, 'utf8')
  if (text.includes(MARK)) continue
  const off = MENDS.filter(m => text.split(m.old).length - 1 !== m.count)
  if (off.length) fail(`${rel} does not contain the text a mend replaces (${off.length} of ${MENDS.length} mends would not apply)`)
  for (const m of MENDS) text = text.split(m.old).join(m.new)
  writeFileSync(file, text)
  console.log(`patch-postgres: ${rel} patched`)
}
