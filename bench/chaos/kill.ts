/**
 * kill -9 at random moments under mixed load: creations that complete, fail
 * ([sim:fail], refunded), get cancelled ([sim:queue] then DELETE), time out at submission
 * ([sim:timeout], 504), or run on the fal contract stub and complete by callback (in flight when
 * a kill comes: their callbacks are lost, their reconciliation polls find them), every creation retried with its Idempotency-Key until it gets an
 * answer that is not a 5xx or a dropped connection. After the last restart the jobs are left
 * to finish, then the ledger invariants are checked in SQL and every acknowledged job is looked up.
 */
import { randomUUID } from 'node:crypto'
import { startService, type ServiceProcess } from '../lib/children.js'
import { createDatabase, seedAccounts } from '../lib/seed.js'
import { RAISED_TIER_LIMITS } from '../lib/stack.js'
import { call, FAL_MODEL, falForChaos, invariants, providerJobsCheck, providerViolations, sleep, violationsOf, type ChaosOptions } from './common.js'

export interface KillOptions extends ChaosOptions { kills: number; minGapMs: number; maxGapMs: number; workers: number }

export async function killChaos (o: KillOptions): Promise<Record<string, number>> {
  const db = await createDatabase(o.databaseUrl, 'chaos_kill')
  const provider = await falForChaos()
  const env = { TIER_LIMITS: RAISED_TIER_LIMITS, SIM_SPEED: '200', SUBMIT_TIMEOUT_MS: '300', NODE_ID: `chaos-kill-${process.pid}`, SHARDS: '2', ...provider.env }
  let svc: ServiceProcess
  try { svc = await startService({ databaseUrl: db.url, env }) } catch (err) { await provider.close(); await db.drop().catch(() => {}); throw err }
  try {
    const accounts = await seedAccounts(svc, 6, 1_000_000, 'kill')
    let running = true
    const acked = new Map<string, { kind: string; key: string }>() // job id -> what, whose
    const figures = { requests: 0, created: 0, replayed: 0, retried: 0, cancelled: 0, cancel_unacknowledged: 0, timeouts_504: 0, conflicts: 0 }
    const cancelAcked: string[] = [] // DELETE answered 200: must be cancelled whatever the kills did
    const kinds = ['ok', 'ok', 'fail', 'queue', 'timeout', 'fal', 'fal'] as const
    const worker = async (w: number) => {
      const a = accounts[w % accounts.length]
      while (running) {
        const kind = kinds[Math.floor(Math.random() * kinds.length)]
        const prompt = kind === 'ok' || kind === 'fal' ? 'a quiet harbour' : `a quiet harbour [sim:${kind}]`
        const model = kind === 'fal' ? FAL_MODEL : 'nano-banana'
        const key = randomUUID()
        let r
        for (let attempt = 0; ; attempt++) {
          r = await call(svc.url, 'POST', '/v1/generate/image', { key: a.key, headers: { 'idempotency-key': key }, body: { model, prompt }, capMs: 30_000 })
          figures.requests++
          if (r.status !== 0 && r.status < 500) break
          if (r.status === 504) break
          if (!running && attempt > 50) break
          figures.retried++
          await sleep(100)
        }
        if (r.status === 201 || r.status === 200) {
          acked.set(r.body.id, { kind, key: a.key })
          if (r.status === 201) figures.created++; else figures.replayed++
          if (kind === 'queue') {
            const d = await call(svc.url, 'DELETE', `/v1/jobs/${r.body.id}`, { key: a.key, capMs: 30_000 })
            if (d.status === 200) { figures.cancelled++; cancelAcked.push(r.body.id) } else figures.cancel_unacknowledged++
          }
        } else if (r.status === 504) {
          figures.timeouts_504++
          if (r.body?.details?.job_id) acked.set(r.body.details.job_id, { kind, key: a.key })
        } else if (r.status === 409) figures.conflicts++
      }
    }
    const load = Array.from({ length: o.workers }, (_, i) => worker(i))
    let kills = 0
    for (let i = 0; i < o.kills; i++) {
      await sleep(o.minGapMs + Math.random() * (o.maxGapMs - o.minGapMs))
      process.kill(svc.pid, 'SIGKILL')
      await svc.stop()
      kills++
      svc = await startService({ databaseUrl: db.url, env })
    }
    await sleep(1000)
    running = false
    await Promise.all(load)
    // A cancel answered 200 survives every kill (the cancellation was committed before the answer).
    const [{ lost }] = await db.sql<{ lost: number }[]>`SELECT count(*)::int AS lost FROM jobs WHERE id = ANY(${cancelAcked}) AND status <> 'cancelled'`
    // [sim:queue] jobs whose DELETE met a kill are still queued (they wait for capacity that
    // never comes, and a queued job's deadline only runs once a provider has it, docs/architecture.md "Providers and media"):
    // counted, then cancelled again as their client would; each must be cancelled now.
    const [{ q }] = await db.sql<{ q: number }[]>`SELECT count(*)::int AS q FROM jobs WHERE status = 'queued' AND deadline_at < now()`
    let cancelAgainFailed = 0
    for (const [id, j] of acked) {
      if (j.kind !== 'queue') continue
      const d = await call(svc.url, 'DELETE', `/v1/jobs/${id}`, { key: j.key, capMs: 30_000 })
      // 409 CANNOT_CANCEL: already over (cancelled earlier); a job left running is counted below.
      if (d.status !== 200 && d.status !== 409) cancelAgainFailed++
    }
    const [{ notCancelled }] = await db.sql<{ notCancelled: number }[]>`
      SELECT count(*)::int AS "notCancelled" FROM jobs WHERE id = ANY(${[...acked].filter(([, j]) => j.kind === 'queue').map(([id]) => id)}) AND status IN ('queued', 'submitted', 'processing')`
    const deadlineWait = Date.now() + 20_000
    let inv = await invariants(db.sql)
    while (inv.stuck_past_deadline > 0 && Date.now() < deadlineWait) { await sleep(500); inv = await invariants(db.sql) }
    if (inv.stuck_past_deadline > 0) {
      const stuck = await db.sql`SELECT id, status, prompt, owner, lease_until, deadline_at, provider_job_id IS NOT NULL AS submitted FROM jobs WHERE status IN ('queued', 'submitted', 'processing') AND deadline_at < now() ORDER BY deadline_at LIMIT 5`
      o.log(`  kill: stuck jobs (first 5): ${JSON.stringify(stuck)}`)
    }
    // Provider jobs: every acknowledged one completes once, charged once (callbacks lost to the
    // kills are found by reconciliation polls).
    const falIds = [...acked].filter(([, j]) => j.kind === 'fal').map(([id]) => id)
    const prov = await providerJobsCheck(db.sql, provider.fal, falIds, 120_000)
    if (providerViolations(prov) > 0) {
      const left = await db.sql`SELECT id, status, provider_job_id, error_message FROM jobs WHERE id = ANY(${falIds}) AND status <> 'completed' LIMIT 5`
      o.log(`  kill: provider jobs not completed (first 5): ${JSON.stringify(left)}`)
    }
    const ids = [...acked.keys()]
    const [{ n }] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE id = ANY(${ids})`
    const [{ d }] = await db.sql<{ d: number }[]>`SELECT count(*)::int AS d FROM (SELECT account_id, idempotency_key FROM jobs WHERE idempotency_key IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1) x`
    const out = {
      kills, queued_past_deadline_before_cancel: q,
      cancel_acknowledged_lost: lost, cancel_again_failed: cancelAgainFailed, queue_jobs_left_running: notCancelled,
      acknowledged: ids.length, acknowledged_lost: ids.length - n, idempotency_key_two_jobs: d,
      ...figures, ...inv, ...prov
    }
    return { ...out, violations: violationsOf(inv) + out.acknowledged_lost + d + lost + notCancelled + cancelAgainFailed + providerViolations(prov) }
  } finally {
    await svc.stop().catch(() => {})
    await provider.close().catch(() => {})
    await db.drop().catch(() => {})
  }
}
