/**
 * The bench's C load generators (bench/lib/*.c): built with the system's C compiler on first
 * use, cached in the temp directory under the source's hash, so an edited source is rebuilt.
 */
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DIST } from './children.js'

const built = new Map<string, string | null>()

/** The executable of bench/lib/<name>.c, built on first call; null when it cannot be built here. */
export function buildNative (name: string): string | null {
  const known = built.get(name)
  if (known !== undefined) return known
  let bin: string | null = null
  try {
    const source = join(DIST, '..', 'bench', 'lib', `${name}.c`)
    const src = readFileSync(source)
    const out = join(tmpdir(), `genjobs-${name}-${createHash('sha256').update(src).digest('hex').slice(0, 12)}`)
    if (!existsSync(out)) execFileSync(process.env.CC ?? 'cc', ['-O2', '-o', out, source], { stdio: 'pipe' })
    bin = out
  } catch {}
  built.set(name, bin)
  return bin
}
