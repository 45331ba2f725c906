/**
 * Process accounting from /proc (Linux): CPU time of a whole process (every thread), its RSS,
 * and the CPU of the PostgreSQL backends serving one database. These are the figures that do
 * not depend on the load generator's own ceiling (docs/benchmarks.md "Running").
 */
import { execFileSync } from 'node:child_process'
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

let tickUs = 10_000
try { tickUs = 1e6 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) } catch {}

/**
 * The fields of a /proc stat file after the command name (which may itself contain spaces and
 * parentheses): index k is field k + 3 of proc(5). Null when the process is gone.
 */
function statFields (path: string): string[] | null {
  try {
    const stat = readFileSync(path, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  } catch { return null }
}

/** utime + stime of a process (all its threads), in microseconds; 0 when it is gone. */
export function cpuUs (pid: number): number {
  const f = statFields(`/proc/${pid}/stat`)
  return f === null ? 0 : (Number(f[11]) + Number(f[12])) * tickUs // fields 14 and 15 of proc(5)
}

/** Minor page faults of a process so far, every thread (field 10 of proc(5)); 0 once it exited. */
export function minorFaults (pid: number): number {
  const f = statFields(`/proc/${pid}/stat`)
  return f === null ? 0 : Number(f[7])
}

/** CPU (µs) of a process's main thread alone (the thread whose id is the pid: the event loop). */
export function mainThreadCpuUs (pid: number): number {
  const f = statFields(`/proc/${pid}/task/${pid}/stat`)
  return f === null ? 0 : (Number(f[11]) + Number(f[12])) * tickUs
}

/** CPU (µs) of every thread of a process, by thread id. */
export function threadsCpuUs (pid: number): Map<number, number> {
  const out = new Map<number, number>()
  let tids: string[] = []
  try { tids = readdirSync(`/proc/${pid}/task`) } catch { return out }
  for (const t of tids) {
    const f = statFields(`/proc/${pid}/task/${t}/stat`)
    if (f !== null) out.set(Number(t), (Number(f[11]) + Number(f[12])) * tickUs)
  }
  return out
}

/** Resident set size in bytes (VmRSS). */
export function rssBytes (pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m ? Number(m[1]) * 1024 : 0
}

/**
 * CPU (µs) of every PostgreSQL backend connected to `database`, by pid. Backends carry their
 * database in the process title (`postgres: 15/main: user db 127.0.0.1(port) idle`).
 * Shared background processes (WAL writer, checkpointer) are not attributable to one client
 * and are not counted; the machine's server is shared with other work.
 */
export function pgBackends (database: string): Map<number, number> {
  const out = new Map<number, number>()
  const needle = ` ${database} `
  for (const d of readdirSync('/proc')) {
    if (d.charCodeAt(0) < 48 || d.charCodeAt(0) > 57) continue
    let title: string
    try { title = readFileSync(`/proc/${d}/cmdline`, 'latin1') } catch { continue }
    if (!title.startsWith('postgres: ') || !title.replace(/\0/g, ' ').includes(needle)) continue
    out.set(Number(d), cpuUs(Number(d)))
  }
  return out
}

/** CPU spent by backends between two snapshots; a backend born in between counts from 0. */
export function pgDelta (before: Map<number, number>, after: Map<number, number>): number {
  let sum = 0
  for (const [pid, us] of after) sum += us - (before.get(pid) ?? 0)
  return sum
}

/** Soft and hard RLIMIT_NOFILE of this process. */
export function fdLimits (): { soft: number; hard: number } {
  const line = readFileSync('/proc/self/limits', 'utf8').split('\n').find(l => l.startsWith('Max open files')) ?? ''
  const [soft, hard] = line.replace('Max open files', '').trim().split(/\s+/)
  const n = (s: string) => s === 'unlimited' ? Infinity : Number(s)
  return { soft: n(soft), hard: n(hard) }
}

/** 1, 5 and 15 minute load averages (the machine may be shared: recorded with the results). */
export function loadAvg (): number[] {
  return readFileSync('/proc/loadavg', 'utf8').trim().split(' ').slice(0, 3).map(Number)
}

/** Machine description for the results file. */
export function machine (): Record<string, unknown> {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8')
  const model = /model name\s*:\s*(.*)/.exec(cpuinfo)?.[1] ?? 'unknown'
  const cores = (cpuinfo.match(/^processor\s*:/gm) ?? []).length
  const mem = /MemTotal:\s+(\d+) kB/.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1]
  return { cores, cpuModel: model, memTotalMB: mem ? Math.round(Number(mem) / 1024) : null, node: process.version, platform: `${process.platform} ${process.arch}`, loadAvgAtStart: loadAvg(), fdLimit: fdLimits() }
}

/**
 * What creating a small file costs on the filesystem the benchmark data lives on (the service
 * and its baselines keep DATA_DIR under os.tmpdir()): `n` files of 2 KB written as local
 * storage writes a result (open exclusive, write, close, rename into place), in µs of this
 * thread's CPU (user + system) and of wall clock a file. The files are removed after.
 * On ext4 without a journal this reads ~25 µs on a quiet disk and up to ~1,500 µs for the first
 * thousands of files created after many were deleted (docs/benchmarks.md "What limits each
 * figure"): a result-storing scenario (provider-*) reads slower then, whatever the service does.
 */
export function fileCreateCost (n = 400): { cpuUs: number; wallUs: number } {
  const dir = mkdtempSync(join(tmpdir(), 'genjobs-bench-fsprobe-'))
  const bytes = Buffer.alloc(2048, 7)
  try {
    const c0 = process.cpuUsage()
    const w0 = performance.now()
    for (let i = 0; i < n; i++) {
      const tmp = join(dir, `${i}.tmp`)
      const fd = openSync(tmp, 'wx')
      try { writeSync(fd, bytes) } finally { closeSync(fd) }
      renameSync(tmp, join(dir, `${i}.png`))
    }
    const c = process.cpuUsage(c0)
    return { cpuUs: Math.round((c.user + c.system) / n), wallUs: Math.round((performance.now() - w0) * 1000 / n) }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
