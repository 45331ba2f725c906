// The npm registry reachable here does not serve some platform builds (for example
// @msgpackr-extract/msgpackr-extract-darwin-arm64), so `npm install` leaves them out of
// package-lock.json and `npm ci` then refuses the lock as out of sync. This adds the missing
// optional platform packages as lock entries restricted to their os/cpu: `npm ci` skips them
// on this platform without fetching anything. Run after any `npm install` that rewrites the lock.
import { readFileSync, writeFileSync } from 'node:fs'

const file = new URL('../package-lock.json', import.meta.url)
const lock = JSON.parse(readFileSync(file, 'utf8'))
const pkgs = lock.packages
let added = 0
for (const [path, meta] of Object.entries(pkgs)) {
  for (const [dep, range] of Object.entries(meta.optionalDependencies ?? {})) {
    const base = path === '' ? '' : `${path}/`
    if (pkgs[`${base}node_modules/${dep}`] || pkgs[`node_modules/${dep}`]) continue
    const m = /-(darwin|linux|win32|freebsd|android|sunos|openbsd|aix|openharmony)-(arm64|x64|arm|ia32|ppc64|s390x|riscv64|loong64)(?:-(gnu|musl|msvc|eabi|gnueabihf|musleabihf))?$/.exec(dep)
    if (!m) { console.warn(`fix-lock: ${dep} (optional of ${path || 'root'}) is missing and not a platform build; left as is`); continue }
    // Keys in npm's order; `dev` follows the parent, as npm writes it.
    pkgs[`node_modules/${dep}`] = meta.dev
      ? { version: String(range).replace(/^[\^~]/, ''), cpu: [m[2]], dev: true, optional: true, os: [m[1]] }
      : { version: String(range).replace(/^[\^~]/, ''), cpu: [m[2]], optional: true, os: [m[1]] }
    added++
  }
}
// The order npm 11 writes (@npmcli/arborist sorts lock keys with an 'en' collator): sorting by
// code unit instead made every later `npm install` rewrite the lock ('_' vs '-', case).
const collate = new Intl.Collator('en').compare
lock.packages = Object.fromEntries(Object.entries(pkgs).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : collate(a, b))))
writeFileSync(file, JSON.stringify(lock, null, 2) + '\n')
console.log(`fix-lock: ${added} platform entries added`)
