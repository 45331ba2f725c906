/**
 * A measurement, not a test (docs/providers.md "Polling and lost callbacks"): N upstream jobs held
 * in flight on the fal contract stub (it answers IN_PROGRESS to every status call and sends no
 * callback until told), then all of them ended by signed callback.
 * Prints: the service's RSS per in-flight job (RSS with N waiting minus RSS after a warm-up
 * round, over N), the service's CPU while they wait (every thread, % of one core), upstream
 * requests per second while they wait (against the configured budget), then completions/s and
 * the time to drain, and the ledger (each job charged once, credits = sum of entries).
 *
 *   npx tsc -p tsconfig.json && node dist/test/providers/inflight-probe.js --jobs 10000 [--rps 20] [--wait-s 30] [--accounts 20] [--shards 2]
 */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { startFalStub } from '../fixtures/fal-stub.js'
import { startService } from '../../bench/lib/children.js'
import { cpuUs, rssBytes } from '../../bench/lib/proc.js'
import { createDatabase, DEFAULT_DATABASE_URL, ledgerInvariant, seedAccounts, type SeededAccount } from '../../bench/lib/seed.js'
import { RAISED_TIER_LIMITS } from '../../bench/lib/stack.js'
import { sleep } from '../helpers/wait.js'

const { values: a } = parseArgs({
  options: {
    jobs: { type: 'string', default: '10000' },
    rps: { type: 'string', default: '20' },
    'wait-s': { type: 'string', default: '30' },
    accounts: { type: 'string', default: '20' },
    shards: { type: 'string', default: '2' },
    concurrency: { type: 'string', default: '48' },
  },
})
const N = Number(a.jobs)
const RPS = Number(a.rps)
const WAIT_S = Number(a['wait-s'])
const log = (...x: unknown[]) => console.error(new Date().toISOString().slice(11, 19), ...x)

/** Every status call answers IN_PROGRESS: a step list that never runs out (shared by every job's plan). */
const FOREVER_RUNNING = new Proxy([] as string[], { get: (t, k) => k === 'length' ? Number.MAX_SAFE_INTEGER : typeof k === 'string' && /^\d+$/.test(k) ? 'running' : Reflect.get(t, k) })

const fal = await startFalStub()
fal.defaults = { steps: FOREVER_RUNNING, outcome: 'succeeded', media: 'png', finishAfterMs: null, callback: true }
const dir = mkdtempSync(join(tmpdir(), 'inflight-probe-'))
const routes = join(dir, 'providers.json')
writeFileSync(routes, JSON.stringify({
  providers: { fal: { requests_per_second: RPS } },
  routes: { 'nano-banana': [{ provider: 'fal', model: 'fal-ai/nano-banana', input: { prompt: '$.prompt' } }] },
}))
const db = await createDatabase(process.env.DATABASE_URL ?? DEFAULT_DATABASE_URL, 'inflight_probe')
const svc = await startService({
  databaseUrl: db.url,
  env: {
    TIER_LIMITS: RAISED_TIER_LIMITS, PROVIDERS_FILE: routes, FAL_KEY: fal.key, FAL_QUEUE_URL: fal.url, FAL_JWKS_URL: fal.jwksUrl,
    WEBHOOK_ALLOWLIST: new URL(fal.url).host, SHARDS: a.shards!,
  },
})

// Interrupted: stop the service and drop the database all the same (the service is a child).
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    void (async () => { await svc.stop().catch(() => {}); await db.drop().catch(() => {}); process.exit(130) })()
  })
}

async function create (accounts: SeededAccount[], n: number, tag: string): Promise<string[]> {
  const ids: string[] = []
  let next = 0
  let failed = 0
  const body = JSON.stringify({ model: 'nano-banana', prompt: `a lighthouse ${tag}` })
  const worker = async () => {
    while (next < n) {
      const i = next++
      const r = await fetch(`${svc.url}/v1/generate/image`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': accounts[i % accounts.length].key }, body })
      const j = await r.json() as { id?: string }
      if (r.status === 201 && j.id) ids.push(j.id)
      else if (++failed < 5) log('creation answered', r.status, JSON.stringify(j).slice(0, 200))
    }
  }
  await Promise.all(Array.from({ length: Number(a.concurrency) }, worker))
  return ids
}

async function completed (): Promise<number> {
  return Number((await db.sql<{ n: string }[]>`SELECT count(*)::text AS n FROM jobs WHERE status = 'completed'`)[0].n)
}

/** Ends every stub job still running, `batch` at a time (each callback awaited by the stub). */
async function finishAll (batch = 500): Promise<void> {
  const open = [...fal.jobs.values()].filter(j => !j.ended).map(j => j.id)
  for (let i = 0; i < open.length; i += batch) {
    const before = fal.callbacks.length
    const part = open.slice(i, i + batch)
    for (const id of part) fal.finish(id)
    await fal.waitFor(() => fal.callbacks.length >= before + part.length, 120_000, 'callbacks of a batch')
  }
}

/** V8 heap used per thread (main, shard-N, ...) and the shards' structure sizes, from GET /metrics. */
async function heaps (): Promise<{ heap: Record<string, number>; sizes: Record<string, number> }> {
  const text = await (await fetch(`${svc.url}/metrics`, { headers: { authorization: `Bearer ${svc.adminToken}` } })).text()
  const heap: Record<string, number> = {}
  const sizes: Record<string, number> = {}
  for (const m of text.matchAll(/^genjobs_thread_heap_bytes\{thread="([^"]+)",kind="used"\} (\d+)/gm)) heap[m[1]] = Number(m[2])
  for (const m of text.matchAll(/^genjobs_thread_structure_size\{thread="[^"]+",name="(waiting_jobs|live_jobs|account_actors|progress_pending)"\} (\d+)/gm)) {
    sizes[m[1]] = (sizes[m[1]] ?? 0) + Number(m[2])
  }
  return { heap, sizes }
}

async function until (cond: () => Promise<boolean>, ms: number): Promise<boolean> {
  const end = Date.now() + ms
  while (Date.now() < end) { if (await cond()) return true; await sleep(250) }
  return cond()
}

try {
  const accounts = await seedAccounts(svc, Number(a.accounts), 10 * N + 100_000, 'probe')
  // Warm-up: a round created and ended by callback, so pools, caches and code are warm.
  const warm = await create(accounts, 300, 'warm')
  await finishAll()
  await until(async () => await completed() >= warm.length, 60_000)
  await sleep(3000)
  const rss0 = rssBytes(svc.pid)
  const h0 = await heaps()
  log(`warm: ${warm.length} jobs done; rss ${(rss0 / 1048576).toFixed(1)} MiB; creating ${N}`)
  const t0 = Date.now()
  const ids = await create(accounts, N, 'held')
  const createS = (Date.now() - t0) / 1000
  log(`created ${ids.length} in ${createS.toFixed(1)} s (${(ids.length / createS).toFixed(0)}/s); settling`)
  await sleep(10_000)
  const statusOf = () => fal.requests.filter(r => r.route === 'status' || r.route === 'result').length
  const s0 = statusOf()
  const c0 = cpuUs(svc.pid)
  const w0 = Date.now()
  let rssMax = 0
  while (Date.now() - w0 < WAIT_S * 1000) { await sleep(1000); rssMax = Math.max(rssMax, rssBytes(svc.pid)) }
  const wS = (Date.now() - w0) / 1000
  const cpu = (cpuUs(svc.pid) - c0) / 1e6 / wS
  const polls = (statusOf() - s0) / wS
  const rss1 = rssBytes(svc.pid)
  const h1 = await heaps()
  const heapPerJob = Object.fromEntries(Object.keys(h1.heap).map(k => [k, Math.round((h1.heap[k] - (h0.heap[k] ?? 0)) / Math.max(1, ids.length))]))
  const stillRunning = [...fal.jobs.values()].filter(j => !j.ended).length
  log(`waiting ${wS.toFixed(0)} s: rss ${(rss1 / 1048576).toFixed(1)} MiB, cpu ${(cpu * 100).toFixed(2)}% of a core, ${polls.toFixed(2)} status calls/s; draining`)
  const d0 = Date.now()
  const cb0 = fal.callbacks.length
  await finishAll()
  const drained = await until(async () => await completed() >= warm.length + ids.length, 600_000)
  const drainS = (Date.now() - d0) / 1000
  const inv = await ledgerInvariant(db.sql)
  const [{ twice }] = await db.sql<{ twice: number }[]>`SELECT count(*)::int AS twice FROM (SELECT job_id FROM credit_entries WHERE kind = 'charge' GROUP BY job_id HAVING count(*) > 1) x`
  const [{ refunds }] = await db.sql<{ refunds: number }[]>`SELECT count(*)::int AS refunds FROM credit_entries WHERE kind = 'refund'`
  const out = {
    jobs_in_flight: ids.length,
    upstream_jobs_running_at_stub: stillRunning,
    creations_per_s: Math.round(ids.length / createS),
    rss_before_mib: +(rss0 / 1048576).toFixed(1),
    rss_waiting_mib: +(rss1 / 1048576).toFixed(1),
    rss_per_inflight_job_bytes: Math.round((rss1 - rss0) / Math.max(1, ids.length)),
    rss_max_waiting_mib: +(rssMax / 1048576).toFixed(1),
    heap_used_per_inflight_job_bytes_by_thread: heapPerJob,
    shard_sizes_waiting: h1.sizes,
    cpu_waiting_pct_of_one_core: +(cpu * 100).toFixed(2),
    upstream_requests_per_s_waiting: +polls.toFixed(2),
    budget_requests_per_s: RPS,
    callbacks: fal.callbacks.length - cb0,
    callbacks_not_200: fal.callbacks.slice(cb0).filter(c => c.status !== 200).length,
    all_completed: drained,
    drain_s: +drainS.toFixed(1),
    completions_per_s: Math.round(ids.length / drainS),
    charged_twice: twice,
    refunds,
    ledger_violations: inv.violations,
  }
  console.log(JSON.stringify(out, null, 2))
} finally {
  await svc.stop().catch(() => {})
  const tail = svc.stderr().trim()
  if (tail) log('service log tail:', tail.slice(-1500))
  await fal.close()
  await db.drop().catch(() => {})
}
