// Upstream capacity (docs/providers.md "Capacity and budgets"): a cap holds across the shards
// of a node (shared memory) and across nodes (Redis), all or nothing over a job's capacities,
// and a restarted shard or a dead node gives back what it held.
import { randomBytes } from 'node:crypto'
import t from 'tap'
import { Redis } from 'ioredis'
import { createSharedProviderState, LocalCapacity, RedisCapacity, SharedCapacity, type CapSlot } from '../../src/providers/capacity.js'
import { settled, sleep } from '../helpers/wait.js'

const REDIS_URL = process.env.REDIS_URL_TEST || process.env.REDIS_URL || 'redis://127.0.0.1:6379'

async function redisUp (): Promise<boolean> {
  const r = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  try { await r.connect(); await r.ping(); return true } catch { return false } finally { r.disconnect() }
}
const redisIsUp = await redisUp()

const route: CapSlot = { key: 'route:veo3-fast#0:fal:fal-ai/veo3/fast', index: 10, cap: 3 }
const provider: CapSlot = { key: 'provider:fal', index: 1, cap: 2 }

t.test('two shards of a node share one cap (not ceil(cap / shards) each)', async (t) => {
  const state = createSharedProviderState(2)
  const s0 = new SharedCapacity(state, 0)
  const s1 = new SharedCapacity(state, 1)
  const one: CapSlot = { key: 'route:x', index: 7, cap: 1 }
  t.ok(await s0.take([one], 'job_a'), 'shard 0 takes the only slot')
  t.notOk(await s1.take([one], 'job_b'), 'shard 1 finds it taken')
  t.ok(await s0.take([one], 'job_a'), 'taking again for the same job is idempotent')
  s0.release([one], 'job_a')
  s0.release([one], 'job_a')
  t.equal(s1.count(one), 0, 'a second release changes nothing')
  t.ok(await s1.take([one], 'job_b'), 'freed for the other shard')
})

t.test('a job takes every capacity or none (route and provider caps)', async (t) => {
  const state = createSharedProviderState(2)
  const s0 = new SharedCapacity(state, 0)
  const s1 = new SharedCapacity(state, 1)
  t.ok(await s0.take([route, provider], 'j1'))
  t.ok(await s1.take([route, provider], 'j2'))
  t.notOk(await s0.take([route, provider], 'j3'), 'the provider cap (2) is reached though the route has room (3)')
  t.equal(s0.count(route), 2, 'the refused take left the route count as it was')
  s1.release([route, provider], 'j2')
  t.ok(await s0.take([route, provider], 'j3'))
})

t.test('a shard restarted after a crash gives back what its predecessor held; resumed jobs adopt their slot', async (t) => {
  const state = createSharedProviderState(2)
  const s0 = new SharedCapacity(state, 0)
  const s1 = new SharedCapacity(state, 1)
  const cap: CapSlot = { key: 'route:y', index: 20, cap: 2 }
  t.ok(await s0.take([cap], 'a'))
  t.ok(await s1.take([cap], 'b'))
  t.equal(s0.count(cap), 2)
  const again = new SharedCapacity(state, 1) // shard 1 died and starts again
  t.equal(again.count(cap), 1, 'its slot is free again')
  again.adopt([cap], 'b') // it resumes job b, which still runs upstream
  t.equal(again.count(cap), 2, 'and counted again when the job resumes')
  t.notOk(await s0.take([cap], 'c'))
})

t.test('a thread without shared memory counts its own jobs', async (t) => {
  const l = new LocalCapacity()
  const one: CapSlot = { key: 'route:z', index: 0, cap: 1 }
  t.ok(await l.take([one], 'a'))
  t.notOk(await l.take([one], 'b'))
  l.release([one], 'a')
  t.ok(await l.take([one], 'b'))
})

t.test('two nodes on Redis share one cap; a dead node\'s slots expire; a resumed job is counted again', { skip: redisIsUp ? false : `Redis is not reachable at ${REDIS_URL}` }, async (t) => {
  const prefix = `gjc${randomBytes(4).toString('hex')}`
  const ra = new Redis(REDIS_URL)
  const rb = new Redis(REDIS_URL)
  const logs: string[] = []
  const a = new RedisCapacity(ra, prefix, 600, new LocalCapacity(), m => logs.push(m))
  const b = new RedisCapacity(rb, prefix, 600, new LocalCapacity(), m => logs.push(m))
  t.teardown(async () => {
    a.close(); b.close()
    await ra.del(`${prefix}:cap:${route.key}`, `${prefix}:cap:${provider.key}`)
    ra.disconnect(); rb.disconnect()
  })
  // Ten jobs race for a provider cap of 2 from both nodes at once.
  const got = await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? a : b).take([route, provider], `job_${i}`)))
  t.equal(got.filter(Boolean).length, 2, 'exactly two slots granted across both nodes')
  t.equal(await ra.zcard(`${prefix}:cap:${route.key}`), 2, 'and nothing left behind on the route by refused takes')
  const holders = got.map((ok, i) => ok ? i : -1).filter(i => i >= 0)
  // The holders' node keeps renewing them (every ttl / 3): still held after two TTLs.
  await sleep(1300) // time: renewal is under test; the 600 ms TTL runs out twice over
  t.equal(await ra.zcard(`${prefix}:cap:${provider.key}`), 2, 'renewed while their node lives')
  const owner = holders[0] % 2 === 0 ? a : b
  owner.release([route, provider], `job_${holders[0]}`)
  t.equal(await settled(() => ra.zcard(`${prefix}:cap:${provider.key}`), n => n === 1), 1, 'the release reached Redis')
  const other = holders[0] % 2 === 0 ? b : a
  t.ok(await other.take([route, provider], 'job_new'), 'a released slot is free for the other node')
  // A node dies: its entries are no longer renewed and fall out after the TTL.
  a.close(); b.close()
  await sleep(700) // time: the dead node's entries must outlive their 600 ms TTL (expiry is under test)
  const c = new RedisCapacity(ra, prefix, 600, new LocalCapacity(), m => logs.push(m))
  t.teardown(() => c.close())
  t.ok(await c.take([route, provider], 'job_x'), 'expired slots are free')
  c.adopt([route, provider], 'job_resumed')
  t.equal(await settled(() => ra.zcard(`${prefix}:cap:${provider.key}`), n => n === 2), 2, 'a resumed job is counted whatever the cap says (it does run upstream)')
  t.notOk(await c.take([route, provider], 'job_y'))
  t.same(logs, [], 'Redis answered every call')
})

t.test('while Redis cannot be reached a take falls back to this node\'s count (logged), released there', async (t) => {
  const dead = new Redis('redis://127.0.0.1:1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false })
  const logs: string[] = []
  const local = new LocalCapacity()
  const c = new RedisCapacity(dead, 'x', 600, local, m => logs.push(m))
  t.teardown(() => { c.close(); dead.disconnect() })
  const one: CapSlot = { key: 'route:w', index: 3, cap: 1 }
  t.ok(await c.take([one], 'a'))
  t.notOk(await c.take([one], 'b'), 'the node-local cap still holds')
  t.match(logs, [/counting this node only/])
  c.release([one], 'a')
  t.equal(local.count(one), 0, 'released in the fallback')
})
