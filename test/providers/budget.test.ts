// Per-provider request budgets (docs/providers.md "Capacity and budgets"): the routing file's
// `providers` section, the GCRA arithmetic, polls deferred behind submits, an upstream 429
// lowering the budget, and two holders of one budget (two nodes on Redis, two shards on shared
// memory) never passing it together.
import { randomBytes } from 'node:crypto'
import t from 'tap'
import { Redis } from 'ioredis'
import { Budget, gcraTake, gcraThrottle, RedisBudgetStore, SharedBudgetStore, LocalBudgetStore, type BudgetStore, type GcraState } from '../../src/providers/budget.js'
import { createSharedProviderState } from '../../src/providers/capacity.js'
import { parseRouting } from '../../src/providers/routing.js'
import { UpstreamUnavailable } from '../../src/providers/upstream.js'
import { settled, waitFor } from '../helpers/wait.js'

const REDIS_URL = process.env.REDIS_URL_TEST || process.env.REDIS_URL || 'redis://127.0.0.1:6379'

async function redisUp (): Promise<boolean> {
  const r = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  try { await r.connect(); await r.ping(); return true } catch { return false } finally { r.disconnect() }
}
const redisIsUp = await redisUp()

/** The most sends in any window of `ms` (send times in ms, any order). */
function mostInWindow (times: number[], ms: number): number {
  const s = [...times].sort((a, b) => a - b)
  let best = 0
  for (let i = 0, j = 0; i < s.length; i++) {
    while (s[i] - s[j] >= ms) j++
    best = Math.max(best, i - j + 1)
  }
  return best
}

t.test('the routing file\'s providers section is validated at boot with one line naming the mistake', async (t) => {
  const env = { FAL_KEY: 'k' }
  const routes = { 'nano-banana': [{ provider: 'simulated' }] }
  t.same(parseRouting({ routes, providers: { fal: { requests_per_second: 10, burst: 3, max_concurrent: 4, max_wait_ms: 2000 } } }, env).providers,
    { fal: { requests_per_second: 10, burst: 3, max_concurrent: 4, max_wait_ms: 2000 } })
  t.equal(parseRouting({ routes }, env).providers, undefined, 'optional')
  const bad: Array<[unknown, RegExp]> = [
    [[], /"providers" must be an object/],
    [{ openai: {} }, /providers\.openai: unknown provider \(one of fal, replicate, kie\)/],
    [{ simulated: { requests_per_second: 1 } }, /providers\.simulated: unknown provider/],
    [{ fal: 5 }, /providers\.fal must be an object/],
    [{ fal: { rps: 5 } }, /providers\.fal: unknown key "rps"/],
    [{ fal: { requests_per_second: 0 } }, /providers\.fal\.requests_per_second must be a number > 0/],
    [{ fal: { requests_per_second: '10' } }, /requests_per_second must be a number > 0 \(at most 100000\), got "10"/],
    [{ fal: { burst: 2 } }, /providers\.fal\.burst needs requests_per_second/],
    [{ fal: { requests_per_second: 2, burst: 1.5 } }, /burst must be an integer >= 1/],
    [{ fal: { max_concurrent: 0 } }, /providers\.fal\.max_concurrent must be an integer >= 1/],
    [{ fal: { max_wait_ms: -1 } }, /max_wait_ms must be an integer between 0 and 60000/],
  ]
  for (const [providers, re] of bad) {
    t.throws(() => parseRouting({ routes, providers }, env, 'PROVIDERS_FILE x.json'), re, JSON.stringify(providers))
    try { parseRouting({ routes, providers }, env, 'PROVIDERS_FILE x.json') } catch (err) {
      t.notOk((err as Error).message.includes('\n'), 'one line')
      t.ok((err as Error).message.startsWith('PROVIDERS_FILE x.json: '), 'names the file')
    }
  }
})

t.test('GCRA: a burst of B, then one turn per interval; calls reserve turns, polls only take a free one', async (t) => {
  const p = { intervalMs: 100, burst: 3 }
  const s: GcraState = { tat: 0, factor: 1, until: 0, doubled: 0 }
  const now = 1_000_000
  const waits = Array.from({ length: 6 }, () => gcraTake(s, now, p, 'call', 10_000).waitMs)
  t.same(waits, [0, 0, 0, 100, 200, 300], 'three at once, then one every 100 ms')
  const poll = gcraTake(s, now, p, 'poll', 10_000)
  t.equal(poll.ok, false, 'a poll does not queue behind reserved calls')
  t.equal(poll.waitMs, 400, 'and learns when a turn would be free')
  t.notOk(gcraTake(s, now, p, 'call', 350).ok, 'a call whose turn is beyond its wait bound is not reserved')
  t.equal(gcraTake(s, now + 1000, p, 'poll', 0).ok, true, 'after a quiet spell a poll goes at once')
})

t.test('an upstream 429 halves the rate until its Retry-After, at most once a second, and spends the burst', async (t) => {
  const p = { intervalMs: 100, burst: 2 }
  const s: GcraState = { tat: 0, factor: 1, until: 0, doubled: 0 }
  const now = 5_000_000
  gcraThrottle(s, now, p, 3000)
  gcraThrottle(s, now + 10, p, 3000) // the other requests of the same burst answer 429 too
  t.equal(s.factor, 2, 'halved once, not once per 429 of the same moment')
  const waits = Array.from({ length: 3 }, () => gcraTake(s, now + 10, p, 'call', 60_000).waitMs)
  t.same(waits.map(w => Math.round(w)), [200, 400, 600], 'no burst left (the first waits one lowered interval), then one turn per 200 ms')
  gcraThrottle(s, now + 1500, p, 3000)
  t.equal(s.factor, 4, 'a later 429 halves again')
  const after = { ...s }
  const late = gcraTake(after, now + 60_000, p, 'call', 0)
  t.ok(late.ok && late.waitMs === 0, 'after Retry-After the full rate is back')
  gcraTake(after, now + 60_000, p, 'call', 0)
  t.equal(gcraTake(after, now + 60_000, p, 'call', 1000).waitMs, 100, 'interval back to 100 ms')
})

t.test('a call whose turn is too far fails as a 429 without waiting (nothing sent); a poll gives up after max_wait_ms', async (t) => {
  const b = new Budget('fal', 1, 1, 200, new LocalBudgetStore())
  await b.acquire('call')
  const started = Date.now()
  const err = await b.acquire('call').catch(e => e)
  t.ok(err instanceof UpstreamUnavailable, 'UpstreamUnavailable')
  t.equal(err.httpStatus, 429, 'treated as the provider\'s 429')
  t.ok(err.retryAfterMs > 200 && err.retryAfterMs <= 1000, `Retry-After is the wait (${err.retryAfterMs} ms)`)
  t.ok(Date.now() - started < 500, 'refused at once (no wait for the turn)')
  const pollStarted = Date.now()
  const perr = await b.acquire('poll').catch(e => e)
  t.equal(perr.httpStatus, 429)
  t.ok(Date.now() - pollStarted < 1000, 'the poll gave up within its bound')
  const ac = new AbortController()
  const waiting = b.acquire('call', ac.signal).catch(e => e)
  ac.abort()
  t.ok(await waiting, 'an aborted wait ends')
})

t.test('two shards on shared memory: together never more than the budget', async (t) => {
  const state = createSharedProviderState(2)
  const p = { intervalMs: 50, burst: 2 }
  const a = new SharedBudgetStore(state, 0, 1)
  const b = new SharedBudgetStore(state, 0, 2)
  const sends: number[] = []
  const base = Date.now()
  for (let i = 0; i < 20; i++) {
    const turn = await (i % 2 === 0 ? a : b).take('call', p, 10_000)
    t.ok(turn.ok)
    sends.push(base + turn.waitMs)
  }
  // 20 turns at 20/s with a burst of 2: the last one about (20 - 2) x 50 ms out.
  t.ok(Math.max(...sends) - base >= 850, `turns spread over ${Math.max(...sends) - base} ms`)
  t.ok(mostInWindow(sends, 1000) <= 20 + 2, 'at most rate x 1 s + burst in any second')
  t.ok(mostInWindow(sends, 100) <= 2 + 2, 'at most rate x 0.1 s + burst in any 100 ms')
  const c = new SharedBudgetStore(createSharedProviderState(1), 1, 1)
  t.ok((await c.take('call', p, 0)).ok, 'another provider has its own record')
})

t.test('two nodes on Redis: one budget, turns handed out across both; a 429 seen by one slows the other', { skip: redisIsUp ? false : `Redis is not reachable at ${REDIS_URL}` }, async (t) => {
  const prefix = `gjb${randomBytes(4).toString('hex')}`
  const ra = new Redis(REDIS_URL)
  const rb = new Redis(REDIS_URL)
  t.teardown(() => { ra.disconnect(); rb.disconnect() })
  const logs: string[] = []
  const a = new Budget('replicate', 10, 2, 5000, new RedisBudgetStore(ra, prefix, 'replicate', new LocalBudgetStore(), m => logs.push(m)))
  const b = new Budget('replicate', 10, 2, 5000, new RedisBudgetStore(rb, prefix, 'replicate', new LocalBudgetStore(), m => logs.push(m)))
  const sends: number[] = []
  const t0 = Date.now()
  await Promise.all(Array.from({ length: 16 }, (_, i) => (i % 2 === 0 ? a : b).acquire('call').then(() => sends.push(Date.now()))))
  t.equal(sends.length, 16, 'every call went (waited for its turn instead of failing)')
  t.ok(Date.now() - t0 >= 1300, `16 calls at 10/s with a burst of 2 took ${Date.now() - t0} ms (>= 1.4 s less timer slack)`)
  // Timer slack can bunch two sends by a few ms; the budget itself allows rate x window + burst.
  t.ok(mostInWindow(sends, 1000) <= 10 + 2 + 1, `at most ${mostInWindow(sends, 1000)} in any second`)
  // Polls are deferred behind reserved calls: with calls queued on either node, a poll waits
  // for all of them (a budget of 10/s without burst, so turns are 100 ms apart).
  let reserved = 0
  const counted = (store: BudgetStore): BudgetStore => ({
    take: async (...a) => { const turn = await store.take(...a); if (turn.ok) reserved++; return turn },
    throttle: (...a) => store.throttle(...a),
  })
  const c = new Budget('replicate', 10, 1, 5000, counted(new RedisBudgetStore(ra, `${prefix}p`, 'replicate', new LocalBudgetStore(), m => logs.push(m))))
  const d = new Budget('replicate', 10, 1, 5000, counted(new RedisBudgetStore(rb, `${prefix}p`, 'replicate', new LocalBudgetStore(), m => logs.push(m))))
  const order: string[] = []
  const calls = Array.from({ length: 4 }, (_, i) => (i % 2 === 0 ? c : d).acquire('call').then(() => order.push('call')))
  await waitFor(() => reserved === 4, { what: 'all four calls to have their turns reserved in Redis' })
  const poll = c.acquire('poll').then(() => order.push('poll'))
  await Promise.all([...calls, poll])
  t.same(order, ['call', 'call', 'call', 'call', 'poll'], 'the poll went after every call queued before it')
  // A 429 answered to node A lowers the budget node B uses.
  a.throttled(2000)
  const h = await settled(() => ra.hgetall(`${prefix}:budget:replicate`), h => Number(h.factor) === 2)
  t.equal(Number(h.factor), 2, 'the slow-down is in Redis')
  const s2: number[] = []
  const t1 = Date.now()
  for (let i = 0; i < 4; i++) { await b.acquire('call'); s2.push(Date.now() - t1) }
  t.ok(s2[3] - s2[0] >= 3 * 200 - 30, `node B now waits 200 ms between turns (${s2.join(', ')})`)
  t.same(logs, [], 'Redis answered every call')
  await ra.del(`${prefix}:budget:replicate`, `${prefix}p:budget:replicate`)
})
