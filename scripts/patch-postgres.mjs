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
// It runs from `prepare` (npm ci / npm install), is idempotent, and warns instead of failing
// when the driver's text no longer matches (a fixed release). Checked by
// test/db/driver-write-timer.test.ts, which fails on the unpatched driver.
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

const root = fileURLToPath(new URL('../node_modules/postgres/', import.meta.url))
if (!existsSync(join(root, 'package.json'))) {
  console.warn('patch-postgres: node_modules/postgres is not installed; nothing to patch')
  process.exit(0)
}

for (const rel of ['src/connection.js', 'cjs/src/connection.js', 'cf/src/connection.js']) {
  const file = join(root, rel)
  if (!existsSync(file)) continue
  let text = readFileSync(file, 'utf8')
  if (text.includes(MARK)) continue
  const off = MENDS.filter(m => text.split(m.old).length - 1 !== m.count)
  if (off.length) {
    console.warn(`patch-postgres: ${rel} does not look like postgres.js 3.4.x; left as is`)
    continue
  }
  for (const m of MENDS) text = text.split(m.old).join(m.new)
  writeFileSync(file, text)
  console.log(`patch-postgres: ${rel} patched`)
}
