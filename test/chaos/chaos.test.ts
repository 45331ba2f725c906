// The short chaos suite inside `npm test` (the full one is `npm run chaos`): kill -9
// under mixed load with the ledger invariants in SQL, a database outage through the TCP fault
// proxy, a body fuzzer over every operation of /v1/openapi.json, and the two-node races
// (trial, overspend, per-key concurrency). Each scenario runs the real service as a child
// process (node dist/src/main.js) on its own database.
import t from 'tap'
import { ADMIN_DATABASE_URL } from '../helpers/db.js'
import { killChaos } from '../../bench/chaos/kill.js'
import { outageChaos } from '../../bench/chaos/outage.js'
import { fuzzChaos } from '../../bench/chaos/fuzz.js'
import { nodesChaos } from '../../bench/chaos/nodes.js'

const o = { databaseUrl: ADMIN_DATABASE_URL, log: (l: string) => t.comment(l) }
const show = (t: any, r: Record<string, number>) => t.comment(Object.entries(r).map(([k, v]) => `${k}=${v}`).join(' '))

t.test('kill -9 twice under mixed load: invariants hold, nothing acknowledged lost', async (t) => {
  const r = await killChaos({ ...o, kills: 2, minGapMs: 1500, maxGapMs: 2500, workers: 8 })
  show(t, r)
  t.equal(r.kills, 2)
  t.ok(r.acknowledged > 20, 'load ran')
  t.equal(r.violations, 0, '0 invariant violations')
})

t.test('database black-holed then cut for 4 s: bounded waits, Retry-After, no restart, recovers by itself', async (t) => {
  const r = await outageChaos({ ...o, outageS: 4, workers: 8, faults: false })
  show(t, r)
  t.equal(r.shard_restarts, 0)
  t.equal(r.errors_without_retry_after, 0)
  t.ok(r.outage_p99_ms <= 5000, `p99 wait ${r.outage_p99_ms} ms`)
  // Recovery must happen by itself (-1: never). Its 5 s target is checked by `npm run chaos` on
  // a quiet machine; inside `npm test` other files load both cores (a fresh-clone CI run took
  // 8.2 s once), so this bound only catches a service that does not come back.
  t.ok(r.recovery_ms >= 0 && r.recovery_ms <= 20_000, `recovery ${r.recovery_ms} ms`)
  t.equal(r.acknowledged_lost, 0)
  t.equal(r.ledger_violations, 0)
})

t.test('fuzzed bodies over every operation: no 5xx, every error an envelope', async (t) => {
  const r = await fuzzChaos({ ...o, requests: 1000, concurrency: 16, seed: Date.now() % 100_000 })
  show(t, r)
  t.ok(r.operations >= 30, `${r.operations} operations`)
  t.equal(r.status_5xx, 0)
  t.equal(r.not_envelope, 0)
  t.equal(r.dropped, 0)
})

// The two-node races (docs/operations.md "Chaos suite", nodes), one round.
t.test('two nodes: one free video, no negative remaining_credits, in-flight within the cap', { skip: process.env.REDIS_URL_TEST ? false : 'REDIS_URL_TEST unset' }, async (t) => {
  const r = await nodesChaos({ ...o, redisUrl: process.env.REDIS_URL_TEST!, rounds: 1 })
  show(t, r)
  t.equal(r.free_videos_rounds_over_1, 0)
  t.equal(r.negative_remaining_credits, 0)
  t.equal(r.stale_balance_reads, 0)
  t.ok(r.inflight_peak_pro_key <= 10)
})
