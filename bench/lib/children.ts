/**
 * Child processes of a benchmark run: the service itself (`node dist/src/main.js`, as
 * `npm start` runs it after the build) and each baseline, every one in its own process so its
 * CPU and memory are measured alone. Children inherit this process's file-descriptor limit
 * (bench/run.ts raises it first).
 */
import { execFileSync, fork, spawn, type ChildProcess } from 'node:child_process'
import { availableParallelism } from 'node:os'
import { randomBytes } from 'node:crypto'
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

/**
 * Data directories are removed when the run ends, not when their service stops: on a file
 * system without a journal (ext4 as this machine's), a new inode skips every free inode of its
 * group deleted in the last minute (six while its inode table block is not yet written back),
 * one inode table lookup each, so removing one scenario's thousands of
 * result files made the next scenario's file creation several times dearer (seen in perf as
 * `__ext4_new_inode` / `recently_deleted`), a cost no production node pays per job.
 */
const leftovers: string[] = []
function removeAtExit (dir: string): void {
  if (leftovers.length === 0) process.once('exit', removeLeftovers)
  leftovers.push(dir)
}

/**
 * The same cost falls on the next run when runs follow each other within minutes (measured
 * here: 500-800 µs of system time a file for minutes after a run removed its files, 50-70 µs
 * once nothing had been removed for four): with BENCH_KEEP_DATA=1 a run leaves its data
 * directories in place and names them, for a series of runs measured back to back; remove
 * them after the series.
 */
function removeLeftovers (): void {
  if (process.env.BENCH_KEEP_DATA === '1') {
    process.stderr.write(`bench: BENCH_KEEP_DATA=1: data directories left in place: ${leftovers.join(' ')}\n`)
    return
  }
  for (const d of leftovers) rmSync(d, { recursive: true, force: true })
}

/** dist/ (this file is dist/bench/lib/children.js once built). */
export const DIST = fileURLToPath(new URL('../../', import.meta.url))

export function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.unref()
    s.on('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port
      s.close(() => resolve(port))
    })
  })
}

function exited (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise(resolve => child.once('exit', () => resolve()))
}

async function terminate (child: ChildProcess, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  child.kill('SIGTERM')
  const t = setTimeout(() => child.kill('SIGKILL'), graceMs)
  await exited(child)
  clearTimeout(t)
}

/** CPUs of the machine, read before the runner pins itself (availableParallelism follows the affinity). */
const CPUS = availableParallelism()

/**
 * BENCH_PIN=1: the runner (and so the load generator) runs on the last CPU and every measured
 * process (service and baselines alike) on the others, so the load generator does not take CPU
 * from what it measures. PostgreSQL is not pinned. Null when not pinning (or on one CPU).
 */
export function serverCpus (): string | null {
  const n = CPUS
  if (!process.env.BENCH_PIN || process.env.BENCH_PIN === '0' || n < 2) return null
  return n === 2 ? '0' : `0-${n - 2}`
}

/** Pins this process (the runner, with autocannon) to the last CPU when BENCH_PIN is set. */
export function pinRunner (): string | null {
  const n = CPUS
  if (serverCpus() === null) return null
  execFileSync('taskset', ['-a', '-p', '-c', String(n - 1), String(process.pid)], { stdio: 'ignore' })
  return String(n - 1)
}

export interface ServiceProcess {
  pid: number
  url: string
  port: number
  adminToken: string
  databaseUrl: string
  /** SIGTERM (the service drains and exits 0), then removes its DATA_DIR. */
  stop (): Promise<number | null>
  /** Output seen so far: pino warnings and errors (LOG_LEVEL=warn) and anything on stderr. */
  stderr (): string
}

export interface ServiceOptions {
  databaseUrl: string
  env: Record<string, string>
  /** Extra node flags, e.g. --cpu-prof (BENCH_NODE_FLAGS). */
  nodeFlags?: string[]
}

/** Starts `node dist/src/main.js` with its own DATA_DIR and waits for GET /v1/health = 200. */
export async function startService (o: ServiceOptions): Promise<ServiceProcess> {
  const port = await freePort()
  const dataDir = mkdtempSync(join(tmpdir(), 'genjobs-bench-'))
  const adminToken = randomBytes(24).toString('hex')
  const env: Record<string, string> = {
    ...process.env as Record<string, string>,
    PORT: String(port),
    HOST: '127.0.0.1',
    PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
    DATABASE_URL: o.databaseUrl,
    ADMIN_TOKEN: adminToken,
    JWT_SECRET: randomBytes(32).toString('hex'),
    DATA_DIR: dataDir,
    LOG_LEVEL: 'warn',
    ...o.env,
  }
  const args = [...(o.nodeFlags ?? []), join(DIST, 'src/main.js')]
  const cpus = serverCpus()
  // taskset execs node: the pid is node's, and every thread it starts inherits the CPU set.
  const child = cpus === null
    ? spawn(process.execPath, args, { env, cwd: dataDir, stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn('taskset', ['-c', cpus, process.execPath, ...args], { env, cwd: dataDir, stdio: ['ignore', 'pipe', 'pipe'] })
  // pino logs (warn and above) go to stdout; crashes to stderr. Both kept, the start line dropped.
  let err = ''
  const keep = (d: string) => { if (err.length < 200_000) err += d.split('\n').filter(l => !l.startsWith('genjobs listening on')).join('\n') }
  child.stdout!.setEncoding('utf8')
  child.stdout!.on('data', keep)
  child.stderr!.setEncoding('utf8')
  child.stderr!.on('data', keep)
  if (process.env.BENCH_SERVICE_LOG) { const out = createWriteStream(process.env.BENCH_SERVICE_LOG); child.stdout!.pipe(out); child.stderr!.pipe(out) }
  const url = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 60_000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`service exited with ${child.exitCode} during start:\n${err.slice(-4000)}`)
    try {
      const r = await fetch(`${url}/v1/health`)
      if (r.status === 200) break
    } catch {}
    if (Date.now() > deadline) { await terminate(child, 2000); throw new Error(`service did not become healthy in 60 s:\n${err.slice(-4000)}`) }
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  return {
    pid: child.pid!,
    url,
    port,
    adminToken,
    databaseUrl: o.databaseUrl,
    stderr: () => err,
    async stop () {
      await terminate(child, 35_000)
      removeAtExit(dataDir)
      return child.exitCode
    },
  }
}

export interface BaselineProcess {
  name: string
  pid: number
  port: number
  /** Sends a command over IPC and waits for the answer with the same `id`. */
  ask<T = Record<string, unknown>> (msg: Record<string, unknown>): Promise<T>
  stop (): Promise<void>
}

/** Extra node flags for baselines and stubs (BENCH_BASELINE_FLAGS, e.g. --cpu-prof), as BENCH_NODE_FLAGS is for the service. */
function baselineFlags (): string[] {
  return (process.env.BENCH_BASELINE_FLAGS ?? '').split(/\s+/).filter(Boolean)
}

/**
 * Forks dist/bench/<script>.js; the child answers `{type: 'ready', port}` over IPC once it
 * listens, and may answer further commands (`{id, ...}` -> `{id, ...}`).
 */
export async function startBaseline (name: string, script: string, env: Record<string, string> = {}): Promise<BaselineProcess> {
  const port = await freePort()
  const cpus = serverCpus()
  // Files a baseline writes go here, removed when the run ends (removeAtExit).
  const dataDir = mkdtempSync(join(tmpdir(), 'genjobs-bench-baseline-'))
  removeAtExit(dataDir)
  const child = fork(join(DIST, 'bench', script), [], {
    env: { ...process.env as Record<string, string>, PORT: String(port), BENCH_DATA_DIR: dataDir, ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    ...(cpus === null ? { execArgv: baselineFlags() } : { execPath: 'taskset', execArgv: ['-c', cpus, process.execPath, ...baselineFlags()] }),
  })
  const waiting = new Map<number, (v: any) => void>()
  let next = 1
  const ready = new Promise<void>((resolve, reject) => {
    child.on('message', (m: any) => {
      if (m?.type === 'ready') { resolve(); return }
      const w = waiting.get(m?.id)
      if (w) { waiting.delete(m.id); w(m) }
    })
    child.once('exit', (code) => reject(new Error(`baseline ${name} exited with ${code} before it was ready`)))
  })
  await ready
  return {
    name,
    pid: child.pid!,
    port,
    ask: (msg) => new Promise((resolve) => {
      const id = next++
      waiting.set(id, resolve)
      child.send({ ...msg, id })
    }),
    stop: () => terminate(child, 5000),
  }
}

export interface FalStubProcess {
  pid: number
  url: string
  key: string
  jwksUrl: string
  /** A control request (`/_stub/<what>`, test/fixtures/fal-stub.ts): GET without a body, POST with one. */
  control<T = any> (what: string, body?: unknown): Promise<T>
  stop (): Promise<void>
}

/** The fal contract stub in its own process (bench/lib/fal-stub-child.ts). */
export async function startFalStubProcess (): Promise<FalStubProcess> {
  const p = await startBaseline('fal stub', 'lib/fal-stub-child.js')
  const info = await p.ask<{ url: string; key: string; jwksUrl: string }>({ cmd: 'info' })
  return {
    pid: p.pid,
    url: info.url,
    key: info.key,
    jwksUrl: info.jwksUrl,
    async control (what, body) {
      const r = await fetch(`${info.url}/_stub/${what}`, body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
      const text = await r.text()
      if (r.status >= 300 && r.status !== 202) throw new Error(`stub control ${what}: ${r.status} ${text.slice(0, 200)}`)
      return JSON.parse(text)
    },
    stop: () => p.stop(),
  }
}
