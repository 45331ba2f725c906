/**
 * `job-get`: authenticated GET /v1/jobs/{id}, 1000 jobs over 100 keys (each connection cycles
 * the (id, key) list from its own offset). The jobs are created through the API and have
 * completed before the run (SIM_SPEED=100), so every read is a cached-key, cached-job read.
 * Targets: CPU per request <= 0.75x Fastify 5 hello-world (no auth, no lookup); p99 <= 10 ms
 * at 100 connections.
 */
import { startBaseline } from './lib/children.js'
import { measure } from './lib/load.js'
import type { Check, Scenario } from './lib/scenario.js'
import { until } from './lib/scenario.js'
import { createJobs, seedAccounts } from './lib/seed.js'
import { bootStack } from './lib/stack.js'

export const scenario: Scenario = {
  name: 'job-get',
  title: 'GET /v1/jobs/{id} (1000 jobs, 100 keys)',
  async prepare (o) {
    const stack = await bootStack(o, 'job-get', { SIM_SPEED: '100' })
    let fastify: Awaited<ReturnType<typeof startBaseline>> | null = null
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
      const requests = jobs.map(j => ({ method: 'GET', path: `/v1/jobs/${j.id}`, headers: { 'x-api-key': j.key } }))
      const svcRun = (seconds: number) => measure(stack.svc.pid, { url: stack.svc.url, connections: o.connections, duration: seconds, requests }).then(x => x.m)
      const fRun = (seconds: number) => measure(fastify!.pid, { url: `http://127.0.0.1:${fastify!.port}/`, connections: o.connections, duration: seconds }).then(x => x.m)
      const svcRounds: number[] = []
      const f = fastify
      return {
        sides: [
          { name: 'service', role: 'service', warmup: async () => { await svcRun(2) }, measure: async () => { const m = await svcRun(o.duration); svcRounds.push(m.non2xx + m.errors); return m } },
          { name: f.name, role: 'baseline', warmup: async () => { await fRun(2) }, measure: () => fRun(o.duration) },
        ],
        targets: [
          { metric: 'cpu_us_per_req', kind: 'ratio', baseline: f.name, op: '<=', value: 0.75 },
          { metric: 'p99_ms', kind: 'absolute', op: '<=', value: 10 },
        ],
        show: ['rps', 'p50_ms', 'p99_ms', 'main_thread_cpu_us_per_req', 'errors', 'non2xx'],
        notes: [`${o.connections} connections; the service authenticates every request (SHA-256 of the key, cached key and account), runs the rate limiter, writes X-RateLimit-* and meters it`],
        after: async () => {
          const bad = svcRounds.reduce((a, b) => a + b, 0)
          const checks: Check[] = [{ metric: 'service answers not 200 (all rounds)', value: bad, target: '= 0', met: bad === 0 }]
          return { checks }
        },
        close: async () => { await f.stop(); await stack.close() },
      }
    } catch (err) {
      await fastify?.stop()
      await stack.close()
      throw err
    }
  },
}
