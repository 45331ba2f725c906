/**
 * Soak (issue 15 point 6): steady mixed load (creations with 2,000-character CJK prompts, job
 * polls, balance reads) for `seconds`, the service's RSS sampled every second from /proc.
 * The job cache gets 16 MB, so it is full by the end of the warm-up.
 * "Flat after warm-up": the RSS at the end is within 15% (or 40 MB) of the RSS when the first
 * quarter of the run ended, and the slope over the last three quarters is small.
 */
import { startService } from '../lib/children.js'
import { rssBytes } from '../lib/proc.js'
import { createDatabase, seedAccounts } from '../lib/seed.js'
import { RAISED_TIER_LIMITS } from '../lib/stack.js'
import { call, sleep, type Answer, type ChaosOptions } from './common.js'

export interface SoakOptions extends ChaosOptions { seconds: number; workers: number }

const MB = 1024 * 1024

export async function soakChaos (o: SoakOptions): Promise<Record<string, number>> {
  const db = await createDatabase(o.databaseUrl, 'chaos_soak')
  const svc = await startService({ databaseUrl: db.url, env: { TIER_LIMITS: RAISED_TIER_LIMITS, SIM_SPEED: '500', SUBMIT_TIMEOUT_MS: '300', SHARDS: '2', JOB_CACHE_MB: '16' } })
  try {
    const accounts = await seedAccounts(svc, 4, 100_000_000, 'soak')
    let running = true
    let requests = 0
    let errors = 0
    const worker = async (w: number) => {
      const a = accounts[w % accounts.length]
      let last: string | null = null
      while (running) {
        let prompt = ''
        for (let j = 0; j < 2000; j++) prompt += String.fromCharCode(0x4e00 + ((requests * 13 + j) % 20_000))
        const r: Answer = Math.random() < 0.4
          ? await call(svc.url, 'POST', '/v1/generate/image', { key: a.key, body: { model: 'nano-banana', prompt } })
          : last && Math.random() < 0.7 ? await call(svc.url, 'GET', `/v1/jobs/${last}`, { key: a.key }) : await call(svc.url, 'GET', '/v1/credits', { key: a.key })
        requests++
        if (r.status === 201) last = r.body.id
        if (r.status >= 500 || r.status === 0) errors++
      }
    }
    const load = Array.from({ length: o.workers }, (_, i) => worker(i))
    const rss: number[] = []
    const started = Date.now()
    while (Date.now() - started < o.seconds * 1000) { rss.push(rssBytes(svc.pid)); await sleep(1000) }
    running = false
    await Promise.all(load)
    const warm = rss[Math.floor(rss.length / 4)] ?? rss[0]
    const end = rss.at(-1) ?? warm
    const tail = rss.slice(Math.floor(rss.length / 4))
    const slopeMbPerMin = tail.length > 1 ? ((tail.at(-1)! - tail[0]) / MB) / ((tail.length - 1) / 60) : 0
    const flat = end <= warm * 1.15 || end - warm <= 40 * MB
    const [{ jobs }] = await db.sql<{ jobs: number }[]>`SELECT count(*)::int AS jobs FROM jobs`
    return {
      seconds: o.seconds, requests, errors, jobs,
      rss_start_mb: Math.round(rss[0] / MB), rss_warm_mb: Math.round(warm / MB), rss_end_mb: Math.round(end / MB),
      rss_max_mb: Math.round(Math.max(...rss) / MB), rss_slope_mb_per_min: Math.round(slopeMbPerMin * 10) / 10,
      violations: (flat ? 0 : 1) + errors,
    }
  } finally {
    await svc.stop().catch(() => {})
    await db.drop().catch(() => {})
  }
}
