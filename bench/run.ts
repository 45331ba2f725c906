/**
 * `npm run bench -- [scenario...] [--rounds N] [--duration S] [--connections C] [--streams N]
 * [--webhook-jobs N] [--inflight N] [--callback-rate R] [--upstream-rps R] [--hog | --hog-only] [--hog-core N]`
 *
 * For each scenario: a fresh database on DATABASE_URL's server (default
 * postgres://postgres@127.0.0.1:5432/postgres), the service started on it as a child process
 * with LOG_LEVEL=warn and every tier limit raised, accounts seeded through the operator API,
 * the baselines started as their own processes, every side warmed up, then the sides measured
 * in alternation (A B A B ...) for N rounds; medians are compared with the targets of docs/benchmarks.md "Scenarios".
 * Prints a table and writes bench/results/<timestamp>.json (machine, commit, every raw figure).
 * --hog runs each named scenario a second time (`<name>+hog`) with a busy loop pinned to one
 * core (--hog-core, default 0) during warm-up and rounds of every side; --hog-only runs only that.
 * BENCH_NODE_FLAGS adds node flags to the service (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof").
 */
import { execFileSync, spawnSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import postgres from 'postgres'
import { DIST, pinRunner, serverCpus } from './lib/children.js'
import type { Metrics } from './lib/load.js'
import { fdLimits, fileCreateCost, loadAvg, machine } from './lib/proc.js'
import { median, sleep, type BenchOptions, type Check, type Prepared, type Scenario, type Target } from './lib/scenario.js'
import { DEFAULT_DATABASE_URL } from './lib/seed.js'
import { scenario as models } from './models.js'
import { scenario as jobGet } from './job-get.js'
import { keyedScenario as jobCreateKeyed, scenario as jobCreate } from './job-create.js'
import { scenario as jobCreateHot } from './job-create-hot.js'
import { scenario as sseHold } from './sse-hold.js'
import { scenario as sseFanout } from './sse-fanout.js'
import { scenario as webhooks } from './webhooks.js'
import { scenario as jobLifecycle, fastScenario as jobLifecycleFast } from './job-lifecycle.js'
import { startHog, type Hog } from './lib/hog.js'
import { scenario as providerCallback } from './provider-callback.js'
import { scenario as providerLifecycle } from './provider-lifecycle.js'
import { scenario as providerInflight } from './provider-inflight.js'
import { scenario as providerSse } from './provider-sse.js'

const ALL: Scenario[] = [
  models, jobGet, jobCreate, jobCreateKeyed, jobCreateHot, sseHold, sseFanout, webhooks, jobLifecycle, jobLifecycleFast,
  providerCallback, providerLifecycle, providerInflight, providerSse,
]
const ROOT = join(DIST, '..')

/** With --hog, ratio targets of `>=` become at most this (with one core hogged, job-create and job-lifecycle must stay >= 2x their baselines). */
const HOG_RATIO_CAP = 2

function parseArgs (argv: string[]): { names: string[]; opts: Omit<BenchOptions, 'log'>; hog: 'off' | 'also' | 'only'; hogCore: number } {
  let hog: 'off' | 'also' | 'only' = 'off'
  let hogCore = 0
  const opts = { rounds: 3, duration: 5, connections: 100, rate: 0, paced: 0, streams: 10_000, webhookJobs: 5000, inflight: 100_000, callbackRate: 1000, upstreamRps: 1000, databaseUrl: process.env.DATABASE_URL || DEFAULT_DATABASE_URL, nodeFlags: (process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean) }
  const names: string[] = []
  const num = (flag: string, v: string | undefined, min: number) => {
    const n = Number(v)
    if (!Number.isFinite(n) || n < min) throw new Error(`${flag} needs a number >= ${min}`)
    return n
  }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    switch (a) {
      case '--rounds': opts.rounds = num(a, argv[++i], 1); break
      case '--duration': opts.duration = num(a, argv[++i], 1); break
      case '--connections': opts.connections = num(a, argv[++i], 1); break
      case '--rate': opts.rate = num(a, argv[++i], 0); break
      case '--paced': opts.paced = num(a, argv[++i], 0); break
      case '--streams': opts.streams = num(a, argv[++i], 10); break
      case '--webhook-jobs': opts.webhookJobs = num(a, argv[++i], 10); break
      case '--inflight': opts.inflight = num(a, argv[++i], 10); break
      case '--callback-rate': opts.callbackRate = num(a, argv[++i], 1); break
      case '--upstream-rps': opts.upstreamRps = num(a, argv[++i], 1); break
      case '--hog': hog = 'also'; break
      case '--hog-only': hog = 'only'; break
      case '--hog-core': hogCore = num(a, argv[++i], 0); break
      case '-h': case '--help':
        process.stdout.write(`usage: npm run bench -- [${ALL.map(s => s.name).join('|')} ...] [--rounds N] [--duration S] [--connections C] [--rate R | --paced R] [--streams N] [--webhook-jobs N] [--inflight N] [--callback-rate R] [--upstream-rps R] [--hog | --hog-only] [--hog-core N]\n`)
        process.exit(0)
        break
      default:
        if (a.startsWith('-')) throw new Error(`unknown option ${a}`)
        if (!ALL.some(s => s.name === a)) throw new Error(`unknown scenario ${a}; known: ${ALL.map(s => s.name).join(', ')}`)
        names.push(a)
    }
  }
  if (opts.rate > 0 && opts.paced > 0) throw new Error('--rate and --paced both hold a rate (autocannon\'s per-second quota, or evenly spaced): give one')
  return { names: names.length ? names : ALL.map(s => s.name), opts, hog, hogCore }
}

/**
 * SSE scenarios hold N sockets in this process and N in the server: make sure the soft
 * RLIMIT_NOFILE allows it, re-executing under `ulimit -n` when only the hard limit does.
 */
function ensureFds (streams: number): number {
  const need = streams + 2048
  const { soft, hard } = fdLimits()
  if (soft >= need) return streams
  if (hard >= need && !process.env.BENCH_FD_RAISED) {
    const r = spawnSync('sh', ['-c', `ulimit -n ${hard} && exec "$0" "$@"`, process.execPath, ...process.execArgv, ...process.argv.slice(1)], { stdio: 'inherit', env: { ...process.env, BENCH_FD_RAISED: '1' } })
    process.exit(r.status ?? 1)
  }
  const capped = Math.max(100, Math.min(streams, soft - 2048))
  process.stderr.write(`note: open-file limit ${soft} (hard ${hard}) allows ${capped} SSE streams, not ${streams}; raise it with \`ulimit -n ${need}\`\n`)
  return capped
}

interface ScenarioResult {
  name: string
  title: string
  skipped?: string
  error?: string
  seconds: number
  sides?: Array<{ name: string; role: string }>
  rounds?: Record<string, Metrics[]>
  medians?: Record<string, Metrics>
  targets?: Array<Target & { service: number; baselineValue: number | null; ratio: number | null; met: boolean }>
  checks?: Check[]
  show?: string[]
  notes?: string[]
  raw?: Record<string, unknown>
  /** What creating a small file cost as the scenario started (fileCreateCost): the disk's state, which result-storing scenarios depend on. */
  fileCreate?: { cpuUs: number; wallUs: number }
}

/**
 * Runs one scenario; with `hogCore` set, a busy-loop process pinned to that core (taskset) runs
 * from before the warm-up until the last round ends, so every side is measured with one core
 * taken, and the result is named `<name>+hog`.
 */
async function runScenario (s: Scenario, o: BenchOptions, hogCore: number | null = null): Promise<ScenarioResult> {
  const t0 = Date.now()
  const label = hogCore === null ? s.name : `${s.name}+hog`
  const out: ScenarioResult = { name: label, title: hogCore === null ? s.title : `${s.title}, one core (${hogCore}) hogged`, seconds: 0 }
  let prepared: Prepared | null = null
  let hog: Hog | null = null
  try {
    out.fileCreate = fileCreateCost()
    o.log(`[${label}] preparing (creating a small file here costs ${out.fileCreate.cpuUs} µs of CPU${out.fileCreate.cpuUs > 100 ? ': a slow filesystem, see docs/benchmarks.md "What limits each figure"' : ''})`)
    const p = await s.prepare(o)
    if ('skip' in p) { out.skipped = p.skip; o.log(`[${label}] skipped: ${p.skip}`); return out }
    prepared = p
    if (hogCore !== null) {
      hog = await startHog(hogCore)
      o.log(`[${label}] CPU hog pid ${hog.pid} pinned to core ${hogCore}`)
    }
    out.sides = p.sides.map(x => ({ name: x.name, role: x.role }))
    for (const side of p.sides) {
      if (side.warmup) { o.log(`[${label}] warming up ${side.name}`); await side.warmup(); await sleep(300) }
    }
    const rounds: Record<string, Metrics[]> = Object.fromEntries(p.sides.map(x => [x.name, []]))
    for (let r = 0; r < o.rounds; r++) {
      for (const side of p.sides) {
        const m = await side.measure(r)
        rounds[side.name].push(m)
        o.log(`[${label}] round ${r + 1}/${o.rounds} ${side.name}: ${summary(m)}`)
        await sleep(300)
      }
    }
    out.rounds = rounds
    out.medians = Object.fromEntries(Object.entries(rounds).map(([name, ms]) => {
      const keys = new Set(ms.flatMap(m => Object.keys(m)))
      return [name, Object.fromEntries([...keys].map(k => [k, median(ms.map(m => m[k]))]))]
    }))
    const svcName = p.sides.find(x => x.role === 'service')!.name
    const targets = hogCore === null ? p.targets : p.targets.map(t => t.kind === 'ratio' && t.op === '>=' ? { ...t, value: Math.min(t.value, HOG_RATIO_CAP) } : t)
    out.targets = targets.map(t => {
      const service = out.medians![svcName][t.metric]
      const baselineValue = t.baseline ? out.medians![t.baseline][t.metric] : null
      const ratio = baselineValue !== null ? service / baselineValue : null
      const v = t.kind === 'ratio' ? ratio! : service
      const met = Number.isFinite(v) && (t.op === '<=' ? v <= t.value : v >= t.value)
      return { ...t, service, baselineValue, ratio, met }
    })
    if (hog) {
      const h = hog.stop()
      hog = null
      p.notes = [...(p.notes ?? []), `one core hogged: a busy loop pinned to core ${hogCore} got ${fmtShare(h.share)} of it over ${fmt(h.seconds)} s (the other processes are not pinned); ratio targets capped at ${HOG_RATIO_CAP}`]
      out.raw = { hog: h }
    }
    out.show = p.show
    out.notes = p.notes
    if (p.after) {
      const a = await p.after()
      out.checks = a.checks
      out.raw = { ...out.raw, ...a.raw }
    }
  } catch (err) {
    out.error = (err as Error).stack ?? String(err)
    o.log(`[${label}] FAILED: ${out.error}`)
  } finally {
    if (hog) hog.stop()
    if (prepared) await prepared.close().catch((err) => o.log(`[${label}] cleanup failed: ${err}`))
    out.seconds = Math.round((Date.now() - t0) / 100) / 10
    o.log(`[${label}] done in ${out.seconds} s`)
  }
  return out
}

function summary (m: Metrics): string {
  return Object.entries(m).filter(([k]) => !['cpu_ms', 'pg_cpu_ms'].includes(k)).map(([k, v]) => `${k}=${fmt(v)}`).join(' ')
}

function fmtShare (v: number): string {
  return `${Math.round(v * 100)}%`
}

export function fmt (v: number | null | undefined): string {
  if (v === null || v === undefined || Number.isNaN(v)) return '-'
  if (Number.isInteger(v)) return String(v)
  const a = Math.abs(v)
  if (a >= 1000) return Math.round(v).toString()
  if (a >= 100) return v.toFixed(0)
  if (a >= 10) return v.toFixed(1)
  if (a >= 1) return v.toFixed(2)
  return v.toFixed(3)
}

const LABELS: Record<string, string> = {
  rps: 'req/s',
  p50_ms: 'latency p50 (ms)',
  p99_ms: 'latency p99 (ms)',
  cpu_us_per_req: 'CPU/request (µs)',
  main_thread_cpu_us_per_req: 'main-thread CPU/request (µs)',
  pg_cpu_us_per_req: 'PostgreSQL CPU/request (µs)',
  total_cpu_us_per_req: 'process+PG CPU/request (µs)',
  errors: 'errors',
  non2xx: 'non-2xx',
  timeouts: 'timeouts',
  rss_per_stream_b: 'RSS growth/stream, settled (bytes)',
  rss_per_stream_2s_b: 'RSS growth/stream after 2 s (bytes)',
  cpu_us_per_stream: 'CPU/stream opened (µs)',
  open_ms: 'time to open all streams (ms)',
  streams: 'streams held',
  delivery_first_ms: 'first delivery (ms)',
  delivery_p50_ms: 'delivery p50 (ms)',
  delivery_p99_ms: 'delivery p99 (ms)',
  delivery_max_ms: 'delivery max (ms)',
  delivered: 'streams that saw done',
  per_s: 'deliveries/s',
  duplicates: 'duplicates',
  lost: 'lost',
  cpu_us_per_delivery: 'CPU/delivery (µs)',
  pg_cpu_us_per_delivery: 'PostgreSQL CPU/delivery (µs)',
  cpu_us_per_stream_event: 'CPU per stream event (µs)',
  client_cpu_us_per_stream_event: 'load generator CPU per stream event (µs)',
  pg_commits_per_req: 'PG commits/request (approx.)',
  rss_before_mb: 'RSS before (MB)',
  rss_after_mb: 'RSS after (MB): with the streams (sse-hold), with the jobs held (provider-inflight)',
  failed: 'streams failed',
  trigger_ms: 'trigger answered after (ms)',
  busiest_thread_share: 'busiest thread\'s share of the CPU',
  deliveries: 'deliveries received',
  drained: 'backlog drained after release',
  drain_ms: 'drain time (ms)',
  fill_ms: 'create+complete time (ms)',
  creations_per_s: 'creations/s',
  completions_per_s: 'completions/s (steady window)',
  completion_ratio: 'completions/s / creations/s',
  lifecycle_per_s: 'jobs completed / (run + drain time) per s',
  jobs_completed: 'jobs completed in the round',
  jobs_failed: 'jobs failed in the round',
  cpu_us_per_job: 'CPU/job, create to completed (µs)',
  main_thread_cpu_us_per_job: 'main-thread CPU/job (µs)',
  syscalls_per_req: 'system calls/request',
  sys_epoll_pwait_per_req: 'epoll_pwait/request',
  sys_epoll_wait_per_req: 'epoll_wait/request',
  sys_recvfrom_per_req: 'recv/request',
  sys_sendto_per_req: 'send/request',
  sys_read_per_req: 'read/request',
  sys_writev_per_req: 'writev/request',
  sys_write_per_req: 'write/request',
  sys_futex_per_req: 'futex/request',
  pg_cpu_us_per_job: 'PostgreSQL CPU/job (µs)',
  total_cpu_us_per_job: 'process+PG CPU/job (µs)',
  stub_cpu_us_per_job: 'fal stub CPU/job (µs)',
  minor_faults_per_job: 'minor page faults/job (process)',
  span_ms: 'first creation to last completion (ms)',
  jobs: 'jobs',
  held: 'jobs held in flight upstream',
  create_ms: 'time to create and submit them (ms)',
  rss_per_job_b: 'RSS growth/in-flight job, settled (bytes)',
  wait_cpu_core_share: 'CPU while waiting (fraction of one core)',
  upstream_rps_wait: 'upstream requests/s while waiting',
  status_rps_wait: 'status polls/s while waiting',
  upstream_calls_per_job: 'upstream API calls/job, create to completed',
  drain_cpu_us_per_job: 'CPU/job during the drain (µs)',
  budget_rps: 'fal request budget (req/s)',
  callbacks_per_s: 'callbacks/s sent by the stub',
  callbacks_not_200: 'callbacks not answered 200',
  group_commits_per_job: 'group-commit transactions/job',
  items_per_group_commit: 'items per group-commit transaction',
  pg_xacts_per_job: 'PostgreSQL transactions/job (read-only included)',
}

export function table (results: ScenarioResult[]): string {
  const rows: string[][] = [['scenario', 'metric', 'service', 'baseline', 'ratio', 'target', 'met?']]
  for (const r of results) {
    if (r.skipped) { rows.push([r.name, 'skipped', r.skipped, '', '', '', '']); continue }
    if (r.error) { rows.push([r.name, 'error', r.error.split('\n')[0].slice(0, 80), '', '', '', '']); continue }
    // Several service sides (sse-fanout: FRONTENDS=1 and 2): the targets are checked on the
    // first; every one gets its rows, named after the side.
    const services = r.sides!.filter(s => s.role === 'service').map(s => s.name)
    const named = (label: string, side: string) => services.length > 1 ? `${label} [${side}]` : label
    const baselines = r.sides!.filter(s => s.role === 'baseline').map(s => s.name)
    for (const t of r.targets ?? []) {
      const target = t.kind === 'ratio' ? `ratio ${t.op} ${t.value}` : `${t.op} ${t.value}`
      rows.push([r.name, named(LABELS[t.metric] ?? t.metric, services[0]), fmt(t.service), t.baseline ? `${fmt(t.baselineValue)} (${t.baseline})` : '', t.ratio !== null ? fmt(t.ratio) : '', target, t.met ? 'yes' : 'NO'])
    }
    for (const svc of services) {
      for (const k of r.show ?? []) {
        if ((r.targets ?? []).some(t => t.metric === k && t.kind === 'ratio')) continue
        const label = named(LABELS[k] ?? k, svc)
        const sv = r.medians![svc][k]
        if (baselines.length === 0) rows.push([r.name, label, fmt(sv), '', '', '', ''])
        for (const b of baselines) {
          const bv = r.medians![b][k]
          if (bv === undefined) { rows.push([r.name, label, fmt(sv), '', '', '', '']); continue }
          rows.push([r.name, label, fmt(sv), `${fmt(bv)} (${b})`, bv ? fmt(sv / bv) : '-', '', ''])
        }
      }
    }
    for (const c of r.checks ?? []) rows.push([r.name, c.metric, String(c.value), '', '', c.target, c.met ? 'yes' : 'NO'])
  }
  const w = rows[0].map((_, i) => Math.max(...rows.map(r => r[i].length)))
  const line = (r: string[]) => '| ' + r.map((c, i) => c.padEnd(w[i])).join(' | ') + ' |'
  return [line(rows[0]), '|' + w.map(n => '-'.repeat(n + 2)).join('|') + '|', ...rows.slice(1).map(line)].join('\n')
}

function git (args: string[]): string {
  try { return execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim() } catch { return '' }
}

async function main (): Promise<void> {
  const { names, opts, hog, hogCore } = parseArgs(process.argv.slice(2))
  const needsStreams = names.some(n => n.startsWith('sse-'))
  const streams = needsStreams ? ensureFds(opts.streams) : opts.streams
  // provider-sse holds one stream a job in this process and in the service.
  if (names.includes('provider-sse')) ensureFds(opts.webhookJobs)
  const o: BenchOptions = { ...opts, streams, log: (m) => process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${m}\n`) }
  const started = new Date()
  const host = machine()
  let pgVersion = ''
  try {
    const a = postgres(o.databaseUrl, { max: 1, onnotice: () => {} })
    pgVersion = (await a`SELECT version()`)[0].version
    await a.end()
  } catch (err) { throw new Error(`cannot reach PostgreSQL at ${o.databaseUrl}: ${err}`) }
  const fd = fdLimits()
  const runnerCpu = pinRunner()
  const pinning = runnerCpu === null ? null : { loadGenerator: runnerCpu, measured: serverCpus() }
  // The service inherits the runner's environment (bench/lib/children.ts): FRONTENDS=2 npm run bench ... runs two front-end threads.
  const frontends = process.env.FRONTENDS || '1 (default)'
  o.log(`bench: ${names.join(', ')}; FRONTENDS=${frontends}; ${o.rounds} rounds, ${o.duration} s runs, ${o.connections} connections${o.rate > 0 ? ` at ${o.rate} req/s (job-get, models)` : ''}${o.paced > 0 ? ` paced at ${o.paced} req/s (job-get, models)` : ''}, ${o.streams} SSE streams; open-file limit ${fd.soft}${pinning ? `; load generator on CPU ${pinning.loadGenerator}, service and baselines on CPU ${pinning.measured}` : ''}`)
  const results: ScenarioResult[] = []
  for (const name of names) {
    const sc = ALL.find(s => s.name === name)!
    if (hog !== 'only') results.push(await runScenario(sc, o))
    if (hog !== 'off') results.push(await runScenario(sc, o, hogCore))
  }
  const finished = new Date()
  const t = table(results)
  process.stdout.write(`\nFRONTENDS=${frontends}${pinning ? `, BENCH_PIN: load generator on CPU ${pinning.loadGenerator}` : ''}\n` + t + '\n')
  for (const r of results) for (const n of r.notes ?? []) process.stdout.write(`- ${r.name}: ${n}\n`)
  const fc = results.filter(r => r.fileCreate !== undefined).map(r => `${r.name} ${r.fileCreate!.cpuUs}`)
  if (fc.length > 0) process.stdout.write(`- creating a small file where the data lives, µs of CPU, as each scenario started: ${fc.join(', ')}\n`)
  const doc = {
    started: started.toISOString(),
    finished: finished.toISOString(),
    seconds: Math.round((finished.getTime() - started.getTime()) / 1000),
    machine: { ...host, loadAvgAtEnd: loadAvg() },
    postgres: pgVersion,
    git: { commit: git(['rev-parse', 'HEAD']), dirty: git(['status', '--porcelain']).split('\n').filter(Boolean).length > 0 },
    options: { ...opts, streams: o.streams, hog, hogCore, pinning, frontends },
    table: t,
    scenarios: results,
  }
  const dir = join(ROOT, 'bench', 'results')
  mkdirSync(dir, { recursive: true })
  const file = join(dir, `${started.toISOString().replace(/[:.]/g, '-')}.json`)
  writeFileSync(file, JSON.stringify(doc, null, 2) + '\n')
  process.stdout.write(`\n${doc.seconds} s in all; results in ${file}\n`)
  if (results.some(r => r.error)) process.exitCode = 1
}

// Run as a program (node dist/bench/run.js); imported (tests of table()), nothing runs.
if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  main().catch((err) => { process.stderr.write(`${err?.stack ?? err}\n`); process.exit(1) })
}
