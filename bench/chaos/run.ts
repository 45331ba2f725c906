/**
 * `npm run chaos [-- scenario...] [--kills N] [--outage S] [--fuzz N] [--soak S] [--rounds N]`
 *
 * The chaos suite. Scenarios: kill (kill -9 under mixed load, ledger invariants in
 * SQL), outage (TCP fault proxy: latency, resets, black hole, cut), nodes (two nodes on one
 * database and Redis: trial, overspend, concurrency races), fuzz (bodies over every operation
 * of /v1/openapi.json), soak (RSS sampled). Each runs the service as `node dist/src/main.js`
 * on a fresh database on DATABASE_URL's server (default postgres://postgres@127.0.0.1:5432/postgres);
 * nodes needs REDIS_URL (default redis://127.0.0.1:6379). Prints every figure and a verdict per
 * scenario, writes bench/results/chaos-<timestamp>.json, exits 1 if any scenario has violations.
 */
import { execFileSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { DIST } from '../lib/children.js'
import { DEFAULT_DATABASE_URL } from '../lib/seed.js'
import { loadAvg } from '../lib/proc.js'
import { fuzzChaos } from './fuzz.js'
import { killChaos } from './kill.js'
import { nodesChaos } from './nodes.js'
import { outageChaos } from './outage.js'
import { SOAK_MIN_SECONDS, soakChaos } from './soak.js'

const args = process.argv.slice(2)
const flag = (name: string, dflt: number) => { const i = args.indexOf(`--${name}`); return i >= 0 ? Number(args[i + 1]) : dflt }
const names = args.filter((a, i) => !a.startsWith('--') && !(i > 0 && args[i - 1].startsWith('--')))
const databaseUrl = process.env.DATABASE_URL || DEFAULT_DATABASE_URL
const redisUrl = process.env.REDIS_URL || 'redis://127.0.0.1:6379'
const log = (l: string) => process.stdout.write(l + '\n')
const o = { databaseUrl, log }

const scenarios: Record<string, () => Promise<Record<string, number>>> = {
  kill: () => killChaos({ ...o, kills: flag('kills', 12), minGapMs: 1500, maxGapMs: 4000, workers: 12 }),
  outage: () => outageChaos({ ...o, outageS: flag('outage', 20), workers: 12 }),
  nodes: () => nodesChaos({ ...o, redisUrl, rounds: flag('rounds', 5) }),
  fuzz: () => fuzzChaos({ ...o, requests: flag('fuzz', 100_000), concurrency: 32 }),
  soak: () => soakChaos({ ...o, seconds: flag('soak', SOAK_MIN_SECONDS), workers: 8 }),
}

const chosen = names.length ? names : Object.keys(scenarios)
const results: Record<string, Record<string, number>> = {}
let failed = 0
for (const name of chosen) {
  const run = scenarios[name]
  if (!run) { log(`unknown scenario ${name}; known: ${Object.keys(scenarios).join(', ')}`); process.exit(2) }
  log(`== ${name} (load average ${loadAvg().map(x => x.toFixed(1)).join(' ')})`)
  const started = Date.now()
  try {
    const r = await run()
    results[name] = { ...r, duration_s: Math.round((Date.now() - started) / 1000) }
    for (const [k, v] of Object.entries(results[name])) log(`  ${k.padEnd(32)} ${v}`)
    const note = r.resolves_limit === 0 ? ` (indicative: shorter than ${SOAK_MIN_SECONDS} s, the RSS fit cannot resolve its limit)` : ''
    log(`  => ${r.violations === 0 ? 'PASS' : 'FAIL'} (${r.violations} violations)${note}`)
    if (r.violations !== 0) failed++
  } catch (err) {
    failed++
    log(`  => ERROR ${(err as Error).stack ?? err}`)
    results[name] = { error: 1 }
  }
}
let commit = ''
try { commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim() } catch {}
const dir = join(DIST, '..', 'bench', 'results')
mkdirSync(dir, { recursive: true })
const file = join(dir, `chaos-${new Date().toISOString().replace(/[:.]/g, '-')}.json`)
writeFileSync(file, JSON.stringify({ commit, at: new Date().toISOString(), loadAverage: loadAvg(), results }, null, 2) + '\n')
log(`results: ${file}`)
process.exit(failed ? 1 : 0)
