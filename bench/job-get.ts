/**
 * `job-get`: authenticated GET /v1/jobs/{id}, 1000 jobs over 100 keys (each connection cycles
 * the (id, key) list from its own offset). The jobs are created through the API and have
 * completed before the run (SIM_SPEED=100), so every read is a cached-key, cached-job read.
 * Targets: CPU per request <= 0.75x Fastify 5 hello-world (no auth, no lookup); p99 <= 10 ms
 * at 100 connections. A bare uWS hello-world is shown too: what uWS itself costs per request.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { startBaseline } from './lib/children.js'
import { measureRead, type LoadOptions } from './lib/load.js'
import { rateNote, until, type Check, type Scenario } from './lib/scenario.js'
import { createJobs, seedAccounts } from './lib/seed.js'
import { bootStack } from './lib/stack.js'

type Metrics = Record<string, number>

/** `perf stat -x,` of `events` on every thread of `pid` while `run` runs: the count of each event. */
async function perfStat (pid: number, events: string[], run: () => Promise<Metrics>): Promise<{ m: Metrics; count: (ev: string) => number }> {
  const perf = spawn('perf', ['stat', '-x', ',', '-e', events.join(','), '-p', String(pid)], { stdio: ['ignore', 'ignore', 'pipe'] })
  let out = ''
  perf.stderr.on('data', (d: Buffer) => { out += d.toString() })
  await new Promise(resolve => setTimeout(resolve, 200)) // perf attaches to every thread first
  const m = await run()
  perf.kill('SIGINT')
  await once(perf, 'exit')
  return { m, count: (ev: string) => Number(out.split('\n').find(l => l.split(',')[2] === ev)?.split(',')[0]) }
}

/**
 * BENCH_PERF=1: the instructions `pid` executes during `run` (user and kernel), per answered
 * request: a cost figure that, unlike CPU time, does not move with the machine's load. Needs
 * hardware counters (a VM may have none) and perf_event_paranoid <= 2 (or root).
 */
async function counted (pid: number, run: () => Promise<Metrics>): Promise<Metrics> {
  if (!process.env.BENCH_PERF || process.env.BENCH_PERF === '0') return run()
  const { m, count } = await perfStat(pid, ['instructions:u', 'instructions:k'], run)
  m.kinstr_user_per_req = count('instructions:u') / 1000 / m.requests
  m.kinstr_kernel_per_req = count('instructions:k') / 1000 / m.requests
  return m
}

/** The system calls BENCH_SYSCALLS=1 counts one by one (each per answered request). */
const SYSCALLS = ['epoll_pwait', 'epoll_wait', 'recvfrom', 'sendto', 'read', 'writev', 'write', 'futex']

/**
 * BENCH_SYSCALLS=1: the system calls `pid` makes during `run` (every thread; the kernel's
 * syscall tracepoints, which need no hardware counters), per answered request: all of them
 * and the common kinds. Where a system call is dear (a VM with page-table isolation and no
 * PCID: ~1 µs each), the count is much of the difference between two servers' CPU/request.
 */
async function syscalls (pid: number, run: () => Promise<Metrics>): Promise<Metrics> {
  if (!process.env.BENCH_SYSCALLS || process.env.BENCH_SYSCALLS === '0') return run()
  const { m, count } = await perfStat(pid, ['raw_syscalls:sys_enter', ...SYSCALLS.map(s => `syscalls:sys_enter_${s}`)], run)
  m.syscalls_per_req = count('raw_syscalls:sys_enter') / m.requests
  for (const s of SYSCALLS) m[`sys_${s}_per_req`] = count(`syscalls:sys_enter_${s}`) / m.requests
  return m
}

export const scenario: Scenario = {
  name: 'job-get',
  title: 'GET /v1/jobs/{id} (1000 jobs, 100 keys)',
  async prepare (o) {
    const stack = await bootStack(o, 'job-get', { SIM_SPEED: '100' })
    let fastify: Awaited<ReturnType<typeof startBaseline>> | null = null
    let uws: Awaited<ReturnType<typeof startBaseline>> | null = null
    try {
      o.log('[job-get] seeding 100 accounts and 1000 jobs')
      let t = Date.now()
      const accounts = await seedAccounts(stack.svc, 100, 1_000_000)
      o.log(`[job-get] accounts in ${Date.now() - t} ms`); t = Date.now()
      const jobs = await createJobs(stack.svc, accounts, 10, 'a lighthouse at dawn (bench job-get)')
      o.log(`[job-get] jobs in ${Date.now() - t} ms`); t = Date.now()
      const done = await until(async () => {
        const [r] = await stack.db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE status = 'completed'`
        return r.n >= jobs.length
      }, 120_000, 250)
      if (!done) throw new Error('the 1000 jobs did not complete within 120 s')
      o.log(`[job-get] completed in ${Date.now() - t} ms`)
      fastify = await startBaseline('Fastify hello', 'baselines/fastify-hello.js')
      // uWS itself (parse, send, syscalls) answering a hello-world: the floor of any uWS service.
      uws = await startBaseline('bare uWS hello', 'baselines/uws-static.js', { ROUTE: '/', BODY: '{"hello":"world"}', CONTENT_TYPE: 'application/json; charset=utf-8' })
      const requests = jobs.map(j => ({ method: 'GET', path: `/v1/jobs/${j.id}`, headers: { 'x-api-key': j.key } }))
      const svcLoad = { url: stack.svc.url, connections: o.connections, rate: o.rate, requests }
      // Each side's run, with the optional perf counters (BENCH_PERF, BENCH_SYSCALLS) around it.
      const runOn = (pid: number, load: LoadOptions) => syscalls(pid, () => counted(pid, () => measureRead(pid, load, o.paced)))
      const hello = (b: { pid: number; port: number }) => (seconds: number) =>
        runOn(b.pid, { url: `http://127.0.0.1:${b.port}/`, connections: o.connections, rate: o.rate, duration: seconds })
      const svcRun = (seconds: number) => runOn(stack.svc.pid, { ...svcLoad, duration: seconds })
      const fRun = hello(fastify)
      const uRun = hello(uws)
      const svcRounds: number[] = []
      const f = fastify
      const u = uws
      return {
        sides: [
          { name: 'service', role: 'service', warmup: async () => { await svcRun(2) }, measure: async () => { const m = await svcRun(o.duration); svcRounds.push(m.non2xx + m.errors); return m } },
          { name: f.name, role: 'baseline', warmup: async () => { await fRun(2) }, measure: () => fRun(o.duration) },
          { name: u.name, role: 'baseline', warmup: async () => { await uRun(2) }, measure: () => uRun(o.duration) },
        ],
        targets: [
          { metric: 'cpu_us_per_req', kind: 'ratio', baseline: f.name, op: '<=', value: 0.75 },
          { metric: 'p99_ms', kind: 'absolute', op: '<=', value: 10 },
        ],
        show: ['rps', 'p50_ms', 'p99_ms', 'main_thread_cpu_us_per_req', ...(o.paced > 0 ? ['late', 'client_cpu_us_per_req'] : []), ...(process.env.BENCH_PERF ? ['kinstr_user_per_req', 'kinstr_kernel_per_req'] : []), ...(process.env.BENCH_SYSCALLS ? ['syscalls_per_req', ...SYSCALLS.map(s => `sys_${s}_per_req`)] : []), 'errors', 'non2xx'],
        notes: [`${o.connections} connections${rateNote(o)}; the service authenticates every request (SHA-256 of the key, cached key and account), runs the rate limiter, writes X-RateLimit-* and meters it`],
        after: async () => {
          const bad = svcRounds.reduce((a, b) => a + b, 0)
          const checks: Check[] = [{ metric: 'service answers not 200 (all rounds)', value: bad, target: '= 0', met: bad === 0 }]
          return { checks }
        },
        close: async () => { await f.stop(); await u.stop(); await stack.close() },
      }
    } catch (err) {
      await fastify?.stop()
      await uws?.stop()
      await stack.close()
      throw err
    }
  },
}
