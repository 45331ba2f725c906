/**
 * `webhooks`: M job completions (default 5000) delivered to a local receiver (its own process)
 * through the registered-webhook outbox and the delivery pool. The receiver holds its answers
 * while the jobs are created and complete, so the outbox fills with due rows; then it answers
 * and the scenario times how fast the pool drains M deliveries (deliveries/s), counting
 * duplicates and lost ones. Baseline: autocannon POSTing the same M bodies and headers (as
 * the receiver captured them) to the receiver directly, over as many connections as the pool
 * opens to one origin (16).
 * Target: deliveries/s >= 0.5x the direct rate; zero lost.
 * SIM_SPEED=2 makes each image take 7.5 s, so the creations are over before the first job
 * completes. A timed-out attempt would be retried and counted as a duplicate if the receiver
 * had it; the receiver answers held requests within 2 s so that does not happen by design.
 * Skips with a message while POST /v1/webhooks answers 404 (not built yet).
 */
import type { Request } from 'autocannon'
import { startBaseline } from './lib/children.js'
import { load, type Metrics } from './lib/load.js'
import { cpuUs, pgBackends, pgDelta } from './lib/proc.js'
import { sleep, until, type Check, type Scenario } from './lib/scenario.js'
import { api, seedAccounts } from './lib/seed.js'
import { bootStack } from './lib/stack.js'

const ACCOUNTS = 10
/** The delivery pool's undici agent opens at most 16 connections per origin (64 requests in flight). */
const DIRECT_CONNECTIONS = 16
const BODY = JSON.stringify({ model: 'nano-banana', prompt: 'a hook-shaped cloud (bench webhooks)' })

interface Stats {
  received: number; unique: number; uniqueAtRelease: number; duplicates: number; jobs: number; badBodies: number; held: number; done: boolean
  spanMs: number | null; lastAfterStartMs: number | null
}

export const scenario: Scenario = {
  name: 'webhooks',
  title: 'job.completed webhooks to a local receiver',
  async prepare (o) {
    const m = o.webhookJobs
    const receiver = await startBaseline('receiver', 'lib/webhook-receiver.js')
    let stack: Awaited<ReturnType<typeof bootStack>> | null = null
    try {
      stack = await bootStack(o, 'webhooks', { SIM_SPEED: '2', WEBHOOK_ALLOWLIST: `127.0.0.1:${receiver.port}` })
      const s = stack
      const accounts = await seedAccounts(s.svc, ACCOUNTS, 1_000_000)
      const hookUrl = `http://127.0.0.1:${receiver.port}/hook`
      for (const a of accounts) {
        const r = await api(s.svc.url, 'POST', '/v1/webhooks', { key: a.key, body: { url: hookUrl, events: ['job.completed'] } })
        if (r.status === 404) {
          await receiver.stop()
          await s.close()
          return { skip: 'POST /v1/webhooks answers 404: webhooks are not built yet' }
        }
        if (r.status !== 201) throw new Error(`POST /v1/webhooks answered ${r.status}: ${JSON.stringify(r.body).slice(0, 300)}`)
      }
      const createRequests: Request[] = accounts.map(a => ({ method: 'POST', path: '/v1/generate/image', headers: { 'content-type': 'application/json', 'x-api-key': a.key }, body: BODY }))
      const outbox = async () => Number((await s.db.sql<{ n: string }[]>`SELECT count(*)::text AS n FROM webhook_deliveries`)[0].n)
      const delivered = async () => Number((await s.db.sql<{ n: string }[]>`SELECT count(*)::text AS n FROM webhook_deliveries WHERE status = 'delivered'`)[0].n)
      const stats = () => receiver.ask<Stats>({ cmd: 'stats' })
      let samples: Array<{ headers: Record<string, string>; body: string }> = []
      let lostTotal = 0
      let dupTotal = 0
      let notDelivered = 0
      const retried = async () => Number((await s.db.sql<{ n: string }[]>`SELECT count(*)::text AS n FROM webhook_deliveries WHERE attempts > 1`)[0].n)

      const svcRound = async (count: number): Promise<Metrics> => {
        await receiver.ask({ cmd: 'reset', mode: 'hold', expect: count, capture: count })
        const d0 = await outbox()
        const t0 = performance.now()
        const created = await load({ url: s.svc.url, connections: 50, amount: count, requests: createRequests })
        const createdOk = created['2xx']
        if (createdOk !== count) o.log(`  only ${createdOk} of ${count} creations answered 2xx`)
        const filled = await until(async () => await outbox() >= d0 + createdOk, 60_000, 50)
        const fillMs = performance.now() - t0
        if (!filled) o.log('  the outbox did not reach the expected row count within 60 s')
        const c0 = cpuUs(s.svc.pid)
        const pg0 = pgBackends(s.db.name)
        await receiver.ask({ cmd: 'release' })
        await until(async () => (await stats()).done, 60_000, 20)
        const c1 = cpuUs(s.svc.pid)
        const pg1 = pgBackends(s.db.name)
        const st = await stats()
        await until(async () => await delivered() >= d0 + createdOk, 30_000, 100)
        const dbDelivered = await delivered() - d0
        const lost = createdOk - st.jobs
        lostTotal += lost
        dupTotal += st.duplicates
        notDelivered += createdOk - dbDelivered
        samples = (await receiver.ask<{ samples: typeof samples }>({ cmd: 'samples' })).samples
        await sleep(500)
        const drained = st.unique - st.uniqueAtRelease
        return {
          deliveries: st.unique,
          drained,
          per_s: st.spanMs ? drained / st.spanMs * 1000 : NaN,
          drain_ms: st.spanMs ?? NaN,
          duplicates: st.duplicates,
          lost,
          fill_ms: fillMs,
          cpu_us_per_delivery: (c1 - c0) / Math.max(1, st.unique),
          pg_cpu_us_per_delivery: pgDelta(pg0, pg1) / Math.max(1, st.unique),
        }
      }
      const directRound = async (): Promise<Metrics> => {
        const count = samples.length
        await receiver.ask({ cmd: 'reset', mode: 'open', expect: 0 })
        const requests: Request[] = samples.map(x => ({ method: 'POST', path: '/hook', headers: x.headers, body: x.body }))
        await receiver.ask({ cmd: 'go' })
        const r = await load({ url: `http://127.0.0.1:${receiver.port}`, connections: DIRECT_CONNECTIONS, amount: count, requests })
        const st = await stats()
        const span = st.lastAfterStartMs ?? NaN
        return { deliveries: st.received, per_s: st.received / span * 1000, drain_ms: span, errors: r.errors + r.non2xx }
      }
      return {
        sides: [
          { name: 'service', role: 'service', warmup: async () => { await svcRound(Math.min(500, m)) }, measure: () => svcRound(m) },
          { name: 'direct POST', role: 'baseline', warmup: async () => { await directRound() }, measure: () => directRound() },
        ],
        targets: [{ metric: 'per_s', kind: 'ratio', baseline: 'direct POST', op: '>=', value: 0.5 }],
        show: ['deliveries', 'drained', 'drain_ms', 'duplicates', 'lost', 'fill_ms', 'cpu_us_per_delivery', 'pg_cpu_us_per_delivery'],
        notes: [`${m} completions per round over ${ACCOUNTS} accounts (one registered webhook each, SIM_SPEED=2); deliveries/s = backlog delivered after the receiver starts answering at once / time to the last unique delivery; direct POST uses ${DIRECT_CONNECTIONS} connections (the pool's per-origin connection cap)`],
        after: async () => {
          const r = await retried()
          const failures = await s.db.sql`SELECT coalesce(error, '') AS error, status_code, count(*)::int AS n FROM webhook_attempts WHERE status_code IS NULL OR status_code >= 300 GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 10`
          const checks: Check[] = [
            { metric: 'deliveries that needed a retry (all rounds)', value: r, target: 'counted', met: true },
            { metric: 'lost deliveries (all rounds)', value: lostTotal, target: '= 0', met: lostTotal === 0 },
            { metric: 'outbox rows not delivered (all rounds)', value: notDelivered, target: '= 0', met: notDelivered === 0 },
            { metric: 'duplicate deliveries (all rounds, counted)', value: dupTotal, target: 'counted', met: true },
          ]
          return { checks, raw: { failedAttempts: failures.map(x => ({ ...x })) } }
        },
        close: async () => { await receiver.stop(); await s.close() },
      }
    } catch (err) {
      await receiver.stop()
      await stack?.close()
      throw err
    }
  },
}
