/**
 * Two nodes on one database and one Redis:
 * concurrent free-trial videos, overspending one balance, and one pro key's in-flight cap,
 * each request sent to either node. Figures: free videos accepted per round (must be 1),
 * negative remaining_credits seen, the database balance, in-flight peak per key (cap 10).
 */
import { randomBytes } from 'node:crypto'
import { startService } from '../lib/children.js'
import { api, createDatabase } from '../lib/seed.js'
import { call, invariants, violationsOf, type ChaosOptions } from './common.js'

export interface NodesOptions extends ChaosOptions { redisUrl: string; rounds: number }

const LIMITS = JSON.stringify({ free: { rpm: 1_000_000 }, pro: { rpm: 1_000_000 }, enterprise: { rpm: 1_000_000 }, session: { rpm: 1_000_000 } })

async function account (base: string, admin: string, credits: number, purchase: boolean): Promise<{ id: number; key: string }> {
  const email = `n${randomBytes(4).toString('hex')}@chaos.example`
  const password = 'chaos-password-1'
  const a = await api(base, 'POST', '/v1/admin/accounts', { token: admin, body: { email, password, verified: true, credits: purchase ? 1 : credits } })
  if (purchase) await api(base, 'POST', `/v1/admin/accounts/${a.body.user_id}/purchases`, { token: admin, body: { credits: credits - 1 } })
  const s = await api(base, 'POST', '/v1/auth/login', { body: { email, password } })
  const k = await api(base, 'POST', '/v1/auth/keys', { token: s.body.token, body: { name: 'chaos' } })
  return { id: a.body.user_id, key: k.body.key }
}

export async function nodesChaos (o: NodesOptions): Promise<Record<string, number>> {
  const db = await createDatabase(o.databaseUrl, 'chaos_nodes')
  const env = { REDIS_URL: o.redisUrl, REDIS_PREFIX: `chaos_${randomBytes(3).toString('hex')}`, TIER_LIMITS: LIMITS, SIM_SPEED: '50', SUBMIT_TIMEOUT_MS: '2000', SHARDS: '2' }
  const admin = randomBytes(24).toString('hex')
  const a = await startService({ databaseUrl: db.url, env: { ...env, ADMIN_TOKEN: admin } })
  const b = await startService({ databaseUrl: db.url, env: { ...env, ADMIN_TOKEN: admin } })
  const nodes = [a, b]
  try {
    const video = { model: 'veo3-fast', prompt: 'a paper boat', aspect_ratio: '16:9' }
    // Free trial: 20 concurrent videos per round on a fresh free account; exactly one may pass.
    const trial: number[] = []
    for (let r = 0; r < o.rounds; r++) {
      const u = await account(a.url, admin, 200, false)
      const rs = await Promise.all(Array.from({ length: 20 }, (_, i) => call(nodes[i % 2].url, 'POST', '/v1/generate/video', { key: u.key, body: video })))
      trial.push(rs.filter(x => x.status === 201).length)
    }
    // Overspend: 30 concurrent 120-credit videos on 1,000 credits; at most 8 fit.
    let negative = 0
    let staleReads = 0
    for (let r = 0; r < o.rounds; r++) {
      const u = await account(a.url, admin, 1000, true)
      await Promise.all(nodes.map(n => call(n.url, 'GET', '/v1/credits', { key: u.key }))) // both nodes load the account
      const rs = await Promise.all(Array.from({ length: 30 }, (_, i) => call(nodes[i % 2].url, 'POST', '/v1/generate/video', { key: u.key, body: video })))
      const [{ credits }] = await db.sql<{ credits: string }[]>`SELECT credits::text FROM accounts WHERE id = ${u.id}`
      for (const x of rs.filter(x => x.status === 201)) {
        if (x.body.remaining_credits < 0) negative++
      }
      for (const n of nodes) {
        const c = await call(n.url, 'GET', '/v1/credits', { key: u.key })
        if (c.body.credits !== Number(credits)) staleReads++
      }
    }
    // Concurrency: a pro key (10 in flight); 30 [sim:queue] jobs (they stay queued) across both nodes.
    let inflightPeak = 0
    for (let r = 0; r < o.rounds; r++) {
      const u = await account(a.url, admin, 100_000, true)
      const rs = await Promise.all(Array.from({ length: 30 }, (_, i) => call(nodes[i % 2].url, 'POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a kite [sim:queue]' } })))
      const ok = rs.filter(x => x.status === 201)
      inflightPeak = Math.max(inflightPeak, ok.length)
      for (const x of ok) await call(a.url, 'DELETE', `/v1/jobs/${x.body.id}`, { key: u.key })
    }
    const inv = await invariants(db.sql, 60)
    const out = {
      rounds: o.rounds,
      free_videos_max_per_round: Math.max(...trial),
      free_videos_rounds_over_1: trial.filter(x => x > 1).length,
      negative_remaining_credits: negative,
      stale_balance_reads: staleReads,
      inflight_peak_pro_key: inflightPeak,
      ledger_violations: violationsOf(inv),
    }
    const violations = out.free_videos_rounds_over_1 + negative + staleReads + (inflightPeak > 10 ? 1 : 0) + out.ledger_violations
    return { ...out, violations }
  } finally {
    await a.stop().catch(() => {})
    await b.stop().catch(() => {})
    await db.drop().catch(() => {})
  }
}
