/**
 * A database outage through the TCP fault proxy: added latency, connection
 * resets, then the database black-holed for half of `outageS` and cut off (port closed) for the
 * other half, under creation and read load with Idempotency-Key retries; a quarter of the
 * creations run on the fal contract stub and complete by callback (those in flight during the
 * outage lose their callbacks and are found by reconciliation polls). Figures: shard
 * restarts (from the service's log), client waits, errors without Retry-After, recovery time
 * after the database returns, acknowledged jobs lost.
 */
import { randomUUID } from 'node:crypto'
import { startService } from '../lib/children.js'
import { createDatabase, seedAccounts } from '../lib/seed.js'
import { RAISED_TIER_LIMITS } from '../lib/stack.js'
import { TcpProxy } from '../../test/fixtures/tcp-proxy.js'
import { call, FAL_MODEL, falForChaos, invariants, percentile, providerJobsCheck, providerViolations, sleep, violationsOf, type Answer, type ChaosOptions } from './common.js'

export interface OutageOptions extends ChaosOptions {
  outageS: number
  workers: number
  /** Run the latency and reset phases first (default true). */
  faults?: boolean
}

export async function outageChaos (o: OutageOptions): Promise<Record<string, number>> {
  const db = await createDatabase(o.databaseUrl, 'chaos_outage')
  const u = new URL(o.databaseUrl)
  const proxy = new TcpProxy(Number(u.port || 5432), u.hostname)
  await proxy.start()
  const provider = await falForChaos()
  const svc = await startService({ databaseUrl: proxy.rewrite(db.url), env: { TIER_LIMITS: RAISED_TIER_LIMITS, SIM_SPEED: '200', SUBMIT_TIMEOUT_MS: '300', SHARDS: '2', ...provider.env } })
    .catch(async (err) => { await provider.close(); await proxy.stop().catch(() => {}); await db.drop().catch(() => {}); throw err })
  try {
    const accounts = await seedAccounts(svc, 4, 1_000_000, 'outage')
    let running = true
    const samples: Array<Answer & { create: boolean }> = []
    const acked = new Set<string>()
    const falAcked = new Set<string>()
    const worker = async (w: number) => {
      const a = accounts[w % accounts.length]
      let key = randomUUID()
      let fal = Math.random() < 0.25
      while (running) {
        const create = Math.random() < 0.6
        const r = create
          ? await call(svc.url, 'POST', '/v1/generate/image', { key: a.key, headers: { 'idempotency-key': key }, body: { model: fal ? FAL_MODEL : 'nano-banana', prompt: 'a lantern' }, capMs: 60_000 })
          : await call(svc.url, 'GET', '/v1/credits', { key: a.key, capMs: 60_000 })
        samples.push({ ...r, create })
        if (create && (r.status === 201 || r.status === 200)) {
          acked.add(r.body.id)
          if (fal) falAcked.add(r.body.id)
        }
        if (create && fal && r.status === 504 && r.body?.details?.job_id) falAcked.add(r.body.details.job_id)
        // A retry keeps its key and its model (the same request); a new creation draws both.
        if (create && r.status !== 0 && r.status < 500) { key = randomUUID(); fal = Math.random() < 0.25 }
        if (r.status >= 500 || r.status === 0) await sleep(100)
      }
    }
    const load = Array.from({ length: o.workers }, (_, i) => worker(i))
    await sleep(1500)
    // Latency: 100 ms each way for 3 s (slower, no errors expected).
    const faults = o.faults !== false
    proxy.delayMs = faults ? 100 : 0
    const latStart = Date.now()
    if (faults) await sleep(3000)
    proxy.delayMs = 0
    const latEnd = Date.now()
    // Resets: every connection RST three times, a second apart.
    const resetStart = Date.now()
    for (let i = 0; faults && i < 3; i++) { proxy.reset(); await sleep(1000) }
    const resetEnd = Date.now()
    // The outage: black hole, then cut.
    const downAt = Date.now()
    proxy.blackhole()
    await sleep(o.outageS * 500)
    proxy.pass()
    await proxy.stop()
    await sleep(o.outageS * 500)
    await proxy.start()
    const upAt = Date.now()
    let recovered = -1
    while (Date.now() - upAt < 30_000) {
      const ok = samples.find(x => x.create && x.status === 201 && x.at >= upAt)
      if (ok) { recovered = ok.at + ok.ms - upAt; break }
      await sleep(50)
    }
    await sleep(1000)
    running = false
    await Promise.all(load)
    const during = samples.filter(x => x.at + x.ms >= downAt && x.at < upAt)
    // A creation whose outcome the service cannot know yet answers 504 GATEWAY_TIMEOUT naming
    // its job (docs/api.md "Errors": poll it, do not resubmit): the contract's answer, counted
    // apart; the ledger check below covers its money.
    const namedTimeout = (x: { status: number; body: any }) => x.status === 504 && x.body?.code === 'GATEWAY_TIMEOUT' && typeof x.body?.details?.job_id === 'string'
    const errors = samples.filter(x => (x.status >= 500 || x.status === 0) && !namedTimeout(x))
    const restarts = (svc.stderr().match(/restarting/g) ?? []).length
    const ids = [...acked]
    const [{ n }] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE id = ANY(${ids})`
    // Provider jobs: every acknowledged one completes once, charged once.
    const prov = await providerJobsCheck(db.sql, provider.fal, [...falAcked], 120_000)
    const inv = await invariants(db.sql, 30)
    const lat = samples.filter(x => x.at >= latStart && x.at < latEnd)
    const res = samples.filter(x => x.at >= resetStart && x.at < resetEnd)
    const out = {
      outage_s: o.outageS,
      requests: samples.length,
      latency_phase_errors: lat.filter(x => x.status >= 500 || x.status === 0).length,
      latency_phase_p99_ms: percentile(lat.map(x => x.ms), 99),
      reset_phase_errors: res.filter(x => x.status >= 500 || x.status === 0).length,
      reset_phase_requests: res.length,
      outage_requests: during.length,
      outage_p50_ms: percentile(during.map(x => x.ms), 50),
      outage_p99_ms: percentile(during.map(x => x.ms), 99),
      outage_max_ms: percentile(during.map(x => x.ms), 100),
      errors: errors.length,
      timeouts_504_naming_job: samples.filter(namedTimeout).length,
      errors_without_retry_after: errors.filter(x => x.retryAfter === null).length,
      errors_not_500_503: errors.filter(x => x.status !== 500 && x.status !== 503).length,
      shard_restarts: restarts,
      recovery_ms: recovered,
      acknowledged: ids.length,
      acknowledged_lost: ids.length - n,
      ledger_violations: violationsOf(inv),
      ...prov,
    }
    const violations = (out.errors_without_retry_after > 0 ? 1 : 0) + (out.errors_not_500_503 > 0 ? 1 : 0) + (restarts > 0 ? 1 : 0) +
      (out.outage_p99_ms > 5000 ? 1 : 0) + (recovered < 0 || recovered > 5000 ? 1 : 0) + out.acknowledged_lost + out.ledger_violations +
      providerViolations(prov)
    if (violations) o.log(`  outage: ledger ${JSON.stringify(inv)}; statuses ${JSON.stringify(Object.fromEntries([...new Set(errors.map(x => x.status))].map(st => [st, errors.filter(x => x.status === st).length])))}\n  service log (tail): ${svc.stderr().slice(-1500)}`)
    return { ...out, violations }
  } finally {
    await svc.stop().catch(() => {})
    await provider.close().catch(() => {})
    await proxy.stop().catch(() => {})
    await db.drop().catch(() => {})
  }
}
