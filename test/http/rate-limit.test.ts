// Sliding 60-second window per key (docs/api.md "Usage and limits"): the limiter alone, then through HTTP.
import t from 'tap'
import { DEFAULT_TIER_LIMITS, loadConfig, parseTierLimits } from '../../src/config.js'
import { RateLimiter } from '../../src/http/rate-limit.js'
import { assertError } from '../helpers/assert.js'
import { createUser, startServer } from '../helpers/server.js'

const T0 = 1_700_000_000_000 // a whole second

t.test('RateLimiter: limit requests pass with decreasing remaining, the next is refused', async (t) => {
  const rl = new RateLimiter()
  t.teardown(() => rl.close())
  for (let i = 1; i <= 3; i++) t.same(rl.hit('a', 3, T0 + i), { allowed: true, limit: 3, remaining: 3 - i, retryAfter: 0 })
  const d = rl.hit('a', 3, T0 + 10)
  t.equal(d.allowed, false)
  t.equal(d.remaining, 0)
  t.equal(d.limit, 3)
  t.equal(d.retryAfter, 60, 'all three left at second 0: a slot frees 60 s later')
  t.equal(rl.hit('b', 3, T0 + 10).allowed, true, 'buckets are independent')
})

t.test('RateLimiter: the window slides; Retry-After is the time until the oldest counted request leaves', async (t) => {
  const rl = new RateLimiter()
  t.teardown(() => rl.close())
  t.equal(rl.hit('k', 3, T0).allowed, true) // second 0
  t.equal(rl.hit('k', 3, T0 + 20_000).allowed, true) // second 20
  t.equal(rl.hit('k', 3, T0 + 30_000).allowed, true) // second 30
  let d = rl.hit('k', 3, T0 + 31_000)
  t.equal(d.allowed, false)
  t.equal(d.retryAfter, 29, 'the request of second 0 leaves at second 60')
  d = rl.hit('k', 3, T0 + 59_999)
  t.equal(d.allowed, false, 'still inside the window at 59.999 s')
  t.equal(d.retryAfter, 1)
  d = rl.hit('k', 3, T0 + 60_000)
  t.equal(d.allowed, true, 'a slot freed at 60 s')
  t.equal(d.remaining, 0)
  d = rl.hit('k', 3, T0 + 61_000)
  t.equal(d.allowed, false)
  t.equal(d.retryAfter, 19, 'next to leave: second 20, at second 80')
  d = rl.hit('k', 3, T0 + 80_000)
  t.equal(d.allowed, true)
  // Refused requests are not counted: hammering does not push the window.
  for (let i = 0; i < 50; i++) rl.hit('k', 3, T0 + 80_500)
  d = rl.hit('k', 3, T0 + 90_000)
  t.equal(d.allowed, true, 'second 30 left at 90')
})

t.test('RateLimiter: after a full idle window everything is forgotten', async (t) => {
  const rl = new RateLimiter()
  t.teardown(() => rl.close())
  for (let i = 0; i < 5; i++) rl.hit('k', 5, T0 + i * 1000)
  t.equal(rl.hit('k', 5, T0 + 5000).allowed, false)
  const d = rl.hit('k', 5, T0 + 10 * 60_000)
  t.same(d, { allowed: true, limit: 5, remaining: 4, retryAfter: 0 })
})

t.test('RateLimiter: remaining never goes negative when the limit shrinks (tier change)', async (t) => {
  const rl = new RateLimiter()
  t.teardown(() => rl.close())
  for (let i = 0; i < 10; i++) rl.hit('k', 30, T0)
  const d = rl.hit('k', 5, T0 + 1000)
  t.equal(d.allowed, false)
  t.equal(d.remaining, 0)
  t.equal(d.retryAfter, 59)
})

t.test('parseTierLimits: defaults, partial overrides, and refusals', async (t) => {
  t.same(parseTierLimits(undefined), DEFAULT_TIER_LIMITS)
  t.same(parseTierLimits(''), DEFAULT_TIER_LIMITS)
  t.same(DEFAULT_TIER_LIMITS.free, { rpm: 10, max_concurrent: 3, max_streams: 5 })
  t.same(DEFAULT_TIER_LIMITS.pro, { rpm: 30, max_concurrent: 10, max_streams: 50 })
  t.same(DEFAULT_TIER_LIMITS.enterprise, { rpm: 100, max_concurrent: 50, max_streams: 500 })
  t.equal(DEFAULT_TIER_LIMITS.session.rpm, 100)
  const p = parseTierLimits('{"free":{"rpm":3},"enterprise":{"rpm":1000000,"max_streams":7}}')
  t.same(p.free, { rpm: 3, max_concurrent: 3, max_streams: 5 })
  t.same(p.enterprise, { rpm: 1000000, max_concurrent: 50, max_streams: 7 })
  t.same(p.pro, DEFAULT_TIER_LIMITS.pro)
  t.equal(DEFAULT_TIER_LIMITS.free.rpm, 10, 'defaults are not mutated')
  for (const [name, raw] of [
    ['not JSON', '{free:'],
    ['an array', '[1]'],
    ['a number', '5'],
    ['unknown tier', '{"gold":{"rpm":1}}'],
    ['inherited name', '{"toString":{"rpm":1}}'],
    ['unknown key', '{"free":{"burst":1}}'],
    ['tier not an object', '{"free":3}'],
    ['negative', '{"free":{"rpm":-1}}'],
    ['fraction', '{"free":{"rpm":1.5}}'],
    ['string number', '{"free":{"rpm":"5"}}'],
  ]) t.throws(() => parseTierLimits(raw), `${name} is refused`)
})

t.test('HTTP: a free key gets X-RateLimit-Limit 10, Remaining counting down, the 11th is 429 with Retry-After', async (t) => {
  const s = await startServer(t)
  const u = await createUser(s)
  for (let i = 1; i <= 10; i++) {
    const r = await s.req('GET', '/v1/auth/me', { key: u.key })
    t.equal(r.status, 200, `request ${i}`)
    t.equal(r.headers.get('x-ratelimit-limit'), '10')
    t.equal(r.headers.get('x-ratelimit-remaining'), String(10 - i))
  }
  const r = await s.req('GET', '/v1/auth/me', { key: u.key })
  assertError(t, r, 429, 'RATE_LIMIT_EXCEEDED')
  t.equal(r.headers.get('x-ratelimit-limit'), '10')
  t.equal(r.headers.get('x-ratelimit-remaining'), '0')
  const ra = Number(r.headers.get('retry-after'))
  t.ok(Number.isInteger(ra) && ra >= 58 && ra <= 60, `Retry-After ${ra} s: the first request was just now`)
  t.equal(r.body.retry_after, ra, 'the body says the same')

  const rotated = await s.req('POST', `/v1/auth/keys/${u.keyId}/rotate`, { jwt: u.jwt })
  t.equal(rotated.status, 200, 'the session has its own bucket')
  t.equal(rotated.headers.get('x-ratelimit-limit'), '100', 'sessions: 100 per minute per user')
  assertError(t, await s.req('GET', '/v1/auth/me', { key: rotated.body.key }), 429, 'RATE_LIMIT_EXCEEDED', 'the window belongs to the key id, not the secret')

  const other = await createUser(s)
  const o = await s.req('GET', '/v1/auth/me', { key: other.key })
  t.equal(o.status, 200, 'another key is unaffected')
  t.equal(o.headers.get('x-ratelimit-remaining'), '9')

  t.equal((await s.req('GET', '/v1/auth/me')).headers.get('x-ratelimit-limit'), null, 'no key, no window')
})

t.test('HTTP: TIER_LIMITS changes the per-tier table', async (t) => {
  const s = await startServer(t, { TIER_LIMITS: '{"free":{"rpm":3},"pro":{"rpm":4},"session":{"rpm":1000}}' })
  const u = await createUser(s)
  for (let i = 1; i <= 3; i++) {
    const r = await s.req('GET', '/v1/auth/me', { key: u.key })
    t.equal(r.status, 200)
    t.equal(r.headers.get('x-ratelimit-limit'), '3')
    t.equal(r.headers.get('x-ratelimit-remaining'), String(3 - i))
  }
  const r = await s.req('GET', '/v1/auth/me', { key: u.key })
  assertError(t, r, 429, 'RATE_LIMIT_EXCEEDED')
  t.ok(Number(r.headers.get('retry-after')) >= 1)
  const list = await s.req('GET', '/v1/auth/keys', { jwt: u.jwt })
  t.equal(list.headers.get('x-ratelimit-limit'), '1000')
  t.equal(list.body.keys[0].rate_limit_rpm, 3, 'the listing reports the configured rpm')

  // A purchase makes the key pro (4 rpm): its window keeps the 3 requests already counted.
  t.equal((await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 600 } })).status, 201)
  const p = await s.req('GET', '/v1/auth/me', { key: u.key })
  t.equal(p.status, 200, 'one more slot as pro')
  t.equal(p.headers.get('x-ratelimit-limit'), '4')
  t.equal(p.headers.get('x-ratelimit-remaining'), '0')
  assertError(t, await s.req('GET', '/v1/auth/me', { key: u.key }), 429, 'RATE_LIMIT_EXCEEDED', 'pro limit reached')
})

t.test('a bad TIER_LIMITS stops the configuration from loading (the service does not start)', async (t) => {
  t.throws(() => loadConfig({ TIER_LIMITS: '{"gold":{"rpm":1}}' }), /TIER_LIMITS/)
  t.throws(() => loadConfig({ TIER_LIMITS: 'nope' }), /TIER_LIMITS/)
  t.equal(loadConfig({ TIER_LIMITS: '{"free":{"rpm":7}}' }).tierLimits.free.rpm, 7)
})

t.test('parseTierLimits cannot reach Object.prototype (__proto__, constructor)', async (t) => {
  t.throws(() => parseTierLimits('{"__proto__":{"rpm":1}}'))
  t.throws(() => parseTierLimits('{"constructor":{"rpm":1}}'))
  t.equal(({} as any).rpm, undefined, 'no prototype pollution')
})
