/**
 * `provider-sse`: callback-to-SSE latency. K image jobs (--webhook-jobs, default 5000;
 * nano-banana routed to fal) are created through the API and held in flight by the fal
 * contract stub (its own process, hold mode: IN_PROGRESS, no callback); one SSE stream per job
 * is opened (GET /v1/sse/jobs/{id}, the C client of bench/lib/sse-client.c, or the Node client
 * in the runner without a compiler); then the stub releases the
 * jobs at --callback-rate callbacks a second (default 1000), evenly spaced, each callback signed
 * and POSTed as fal does, the service verifying it, downloading the result into storage and
 * completing the job. Latency of a job: from the moment the stub starts its callback (wall
 * clock, sub-millisecond, taken before signing) to the moment its stream's `event: done`
 * arrives at the client. Target: p99 <= 50 ms at 1000 callbacks a second.
 */
import { randomBytes } from 'node:crypto'
import { appendFileSync } from 'node:fs'
import { startFalStubProcess, type FalStubProcess } from './lib/children.js'
import type { Metrics } from './lib/load.js'
import { cpuUs } from './lib/proc.js'
import { falRoutesEnv } from './lib/provider-routes.js'
import { percentile, sleep, until, type Check, type Scenario } from './lib/scenario.js'
import { ledgerInvariant, seedAccounts, type SeededAccount } from './lib/seed.js'
import { openSse } from './lib/sse-native.js'
import { bootStack, type Stack } from './lib/stack.js'

const ACCOUNTS = 50
const BODY = JSON.stringify({ model: 'nano-banana', prompt: 'bench provider-sse' })

/**
 * `perAccount` jobs on each account, 32 creations at a time, each with its own Idempotency-Key.
 * A creation answered 502 or 503 (a submission or a database that did not answer in time on a
 * loaded machine) is sent again with the same key after a second, up to 30 times: a retried
 * creation that had committed answers its job, never a second one.
 */
async function createHeld (s: Stack, accounts: SeededAccount[], perAccount: number): Promise<Array<{ id: string; key: string }>> {
  const todo = Array.from({ length: perAccount * accounts.length }, (_, i) => accounts[i % accounts.length])
  const out: Array<{ id: string; key: string }> = []
  let next = 0
  const worker = async () => {
    while (next < todo.length) {
      const a = todo[next++]
      const idem = randomBytes(12).toString('hex')
      for (let attempt = 1; ; attempt++) {
        const r = await fetch(`${s.svc.url}/v1/generate/image`, {
          method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': a.key, 'idempotency-key': idem }, body: BODY,
        })
        const body = await r.json() as { id?: string }
        if (r.status === 201 || r.status === 200) { out.push({ id: body.id!, key: a.key }); break }
        if ((r.status !== 502 && r.status !== 503) || attempt === 30) throw new Error(`create job: ${r.status} ${JSON.stringify(body).slice(0, 300)}`)
        await sleep(1000)
      }
    }
  }
  await Promise.all(Array.from({ length: 32 }, worker))
  return out
}

export const scenario: Scenario = {
  name: 'provider-sse',
  title: 'provider callback to the client\'s SSE done event',
  async prepare (o) {
    const k = o.webhookJobs
    const rate = o.callbackRate
    let fal: FalStubProcess | null = null
    let stack: Stack | null = null
    const closeAll = async () => {
      await stack?.close()
      await fal?.stop()
    }
    try {
      fal = await startFalStubProcess()
      const stub = fal
      await stub.control('defaults', { steps: [], outcome: 'succeeded', media: 'png', finishAfterMs: null, callback: true })
      await stub.control('hold', { on: true })
      stack = await bootStack(o, 'provider-sse', falRoutesEnv(stub))
      const s = stack
      const accounts = await seedAccounts(s.svc, ACCOUNTS, 1_000_000_000)
      let notOk = 0

      const round = async (count: number): Promise<Metrics> => {
        const held0 = (await stub.control<{ held: number }>('stats')).held
        const jobs = await createHeld(s, accounts, Math.ceil(count / ACCOUNTS))
        if (!await until(async () => (await stub.control<{ held: number }>('stats')).held >= held0 + jobs.length, 120_000, 100)) throw new Error('the jobs did not all reach the stub within 2 min')
        const opened = await openSse({
          port: s.svc.port, n: jobs.length, path: (i) => `/v1/sse/jobs/${jobs[i].id}`, headers: (i) => ({ 'x-api-key': jobs[i].key, accept: 'text/event-stream' }),
        })
        if (opened.failed) o.log(`  ${opened.failed} streams failed to open: ${JSON.stringify(opened.statuses)}`)
        await sleep(1000)
        const c0 = cpuUs(s.svc.pid)
        const f0 = cpuUs(stub.pid)
        // Hold off first: a job submitted again meanwhile (a lost answer) ends 50 ms later and
        // calls back instead of being held.
        await stub.control('hold', { on: false })
        await stub.control('defaults', { finishAfterMs: 50 })
        await stub.control('release', { rate })
        const doneAt = await opened.done(jobs.length / rate * 1000 + 60_000)
        const c1 = cpuUs(s.svc.pid)
        const f1 = cpuUs(stub.pid)
        await until(async () => !(await stub.control<{ releasing: boolean }>('stats')).releasing, 30_000, 50)
        await stub.control('defaults', { finishAfterMs: null })
        await stub.control('hold', { on: true })
        const released = await stub.control<Array<[string, number, number | null]>>('released')
        await stub.control('forget', {})
        await opened.close()
        const sent = new Map(released.map(([job, at]) => [job, at]))
        notOk += released.filter(r => r[2] !== 200).length
        // Each job's callback start (epoch ms) and latency to its stream's done.
        const seen: Array<[number, number]> = []
        doneAt.forEach((t, i) => {
          const at = sent.get(jobs[i].id)
          if (t > 0 && at !== undefined) seen.push([at, performance.timeOrigin + t - at])
        })
        const lat = seen.map(x => x[1])
        const missing = opened.count - doneAt.filter(t => t > 0).length
        if (missing > 0) o.log(`  ${missing} streams saw no done`)
        // PROVIDER_SSE_TRACE=<file>: those pairs, a line each, to see when in the round the tail happens.
        if (process.env.PROVIDER_SSE_TRACE) appendFileSync(process.env.PROVIDER_SSE_TRACE, seen.map(([at, l]) => `${at.toFixed(1)} ${l.toFixed(1)}`).join('\n') + '\n')
        const times = released.map(r => r[1])
        const spanS = (Math.max(...times) - Math.min(...times)) / 1000
        await sleep(500)
        return {
          streams: opened.count,
          delivered: lat.length,
          delivery_p50_ms: percentile(lat, 50),
          delivery_p99_ms: percentile(lat, 99),
          delivery_max_ms: Math.max(...lat),
          callbacks_per_s: released.length / Math.max(spanS, 1e-3),
          callbacks_not_200: released.filter(r => r[2] !== 200).length,
          cpu_us_per_job: (c1 - c0) / Math.max(1, lat.length),
          stub_cpu_us_per_job: (f1 - f0) / Math.max(1, released.length),
        }
      }
      return {
        sides: [{ name: 'service', role: 'service', warmup: async () => { await round(k) }, measure: () => round(k) }],
        targets: [{ metric: 'delivery_p99_ms', kind: 'absolute', op: '<=', value: 50 }],
        show: ['streams', 'delivered', 'delivery_p50_ms', 'delivery_max_ms', 'callbacks_per_s', 'callbacks_not_200', 'cpu_us_per_job', 'stub_cpu_us_per_job'],
        notes: [`${k} jobs a round over ${ACCOUNTS} accounts, one SSE stream each (C client, its own process), callbacks released by the stub (its own process) at ${rate}/s; latency from the start of each callback (before signing) to its stream's done`],
        after: async () => {
          const inv = await ledgerInvariant(s.db.sql)
          const [r] = await s.db.sql<{ jobs: number; not_completed: number }[]>`
            SELECT count(*)::int AS jobs, count(*) FILTER (WHERE status <> 'completed')::int AS not_completed FROM jobs`
          const checks: Check[] = [
            { metric: 'ledger violations', value: inv.violations, target: '= 0', met: inv.violations === 0 },
            { metric: 'jobs not completed', value: `${r.not_completed} of ${r.jobs}`, target: '= 0', met: r.not_completed === 0 },
            { metric: 'callbacks not answered 200', value: notOk, target: '= 0', met: notOk === 0 },
          ]
          return { checks }
        },
        close: closeAll,
      }
    } catch (err) {
      await closeAll()
      throw err
    }
  },
}
