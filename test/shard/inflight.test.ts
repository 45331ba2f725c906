// Per-key in-flight slots in Redis (src/shard/inflight.ts) for waiting jobs (docs/architecture.md
// "Waiting jobs"): an entry set once per parking, lasting until the job's wake-up plus the
// lease; a lease renewal writes only the entries of jobs parked since the last one; no script
// shortens a set below its longest entry.
import { randomBytes } from 'node:crypto'
import t from 'tap'
import { Redis } from 'ioredis'
import { RedisInFlight, WaitingSlots, type WaitingSlot } from '../../src/shard/inflight.js'

const REDIS_URL = process.env.REDIS_URL_TEST || process.env.REDIS_URL || 'redis://127.0.0.1:6379'

async function redisUp (): Promise<boolean> {
  const r = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  try { await r.connect(); await r.ping(); return true } catch { return false } finally { r.disconnect() }
}
const skip = (await redisUp()) ? false : `no Redis at ${REDIS_URL}`
const LEASE_MS = 30_000

/** A RedisInFlight under a fresh prefix that counts the entries each renew call writes. */
function inflight (teardown: (fn: () => unknown) => void): { r: RedisInFlight; written: number[] } {
  const r = new RedisInFlight(REDIS_URL, `test-inflight-${randomBytes(6).toString('hex')}`, LEASE_MS)
  teardown(() => r.close())
  const written: number[] = []
  const renew = r.renew.bind(r)
  r.renew = async (jobs) => { written.push(jobs.length); return renew(jobs) }
  return { r, written }
}

t.test('a waiting job\'s entry lasts until its wake-up plus the lease, written once', { skip }, async (t) => {
  const { r, written } = inflight(fn => t.teardown(fn))
  const now = Date.now()
  // Due in units of 1 ms here (the shard passes waiting.ts msOf).
  const w = new WaitingSlots(r, LEASE_MS, due => due)
  const a: WaitingSlot = { id: 'job_a', account: 1, key: 7, due: now + 300_000 }
  const b: WaitingSlot = { id: 'job_b', account: 1, key: -1, due: now + 20_000 }
  t.equal(await w.renew([a, b], now), 2, 'both written at first')
  const ea = await r.entry({ accountId: 1, keyId: 7 }, 'job_a')
  t.ok(ea.expiresInMs !== null && ea.expiresInMs > 300_000 + LEASE_MS - 5000 && ea.expiresInMs <= 300_000 + LEASE_MS, `job_a expires in ${ea.expiresInMs} ms (due in 300 s, lease 30 s)`)
  t.ok(ea.setTtlMs >= 2 * (300_000 + LEASE_MS) - 5000, `its set is kept ${ea.setTtlMs} ms`)
  const eb = await r.entry({ accountId: 1, keyId: null }, 'job_b')
  t.ok(eb.expiresInMs !== null && eb.expiresInMs > 20_000 + LEASE_MS - 5000, 'the session slot (no key) too')
  t.equal(await w.renew([a, b], now + 10_000), 0, 'the next renewal writes nothing')
  t.same(written, [2])
  const moved: WaitingSlot = { ...b }
  t.equal(await w.renew([a, moved], now + 20_000), 1, 'a job parked again (a new record) is written again')
  t.same(written, [2, 1])
})

t.test('a live job\'s renewal does not shorten a set that holds a waiting job\'s longer entry', { skip }, async (t) => {
  const { r } = inflight(fn => t.teardown(fn))
  const now = Date.now()
  const w = new WaitingSlots(r, LEASE_MS, due => due)
  await w.renew([{ id: 'job_w', account: 2, key: 9, due: now + 600_000 }], now)
  await r.renew([{ accountId: 2, keyId: 9, jobId: 'job_live' }])
  const e = await r.entry({ accountId: 2, keyId: 9 }, 'job_w')
  t.ok(e.setTtlMs >= 2 * (600_000 + LEASE_MS) - 5000, `set kept ${e.setTtlMs} ms after a live renewal`)
  const live = await r.entry({ accountId: 2, keyId: 9 }, 'job_live')
  t.ok(live.expiresInMs !== null && live.expiresInMs <= LEASE_MS, 'the live job\'s own entry lasts a lease')
  const a = await r.acquire({ accountId: 2, keyId: 9 }, 'job_new', 3)
  t.same(a, { ok: true, n: 2 }, 'both count against the key\'s max_concurrent')
  t.ok((await r.entry({ accountId: 2, keyId: 9 }, 'job_w')).setTtlMs >= 2 * (600_000 + LEASE_MS) - 5000, 'an acquisition does not shorten it either')
})
