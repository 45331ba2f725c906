// src/http/address-window.ts without a server: fixed windows per address, in memory and in Redis.
import t from 'tap'
import { Redis } from 'ioredis'
import { MemoryWindow, RedisSignupThrottle, SIGNUPS_PER_HOUR } from '../../src/http/address-window.js'

t.test('a window lets `limit` through, then says how long until it ends, then opens again', async (t) => {
  const w = new MemoryWindow(3, 60_000)
  const t0 = 1_000_000
  t.equal(w.take('a', t0), 0)
  t.equal(w.take('a', t0 + 1), 0)
  t.equal(w.take('a', t0 + 2), 0)
  t.equal(w.take('a', t0 + 10_000), 50, 'the fourth waits for the rest of the minute')
  t.equal(w.wait('b', t0), 0, 'another address has its own window')
  t.equal(w.take('a', t0 + 60_000), 0, 'a new window')
})

t.test('wait counts nothing; hit counts without checking (refusals only)', async (t) => {
  const w = new MemoryWindow(2, 1000)
  t.equal(w.wait('x', 0), 0)
  w.hit('x', 0); w.hit('x', 1)
  t.equal(w.wait('x', 2), 1)
  t.equal(w.wait('x', 1000), 0, 'the window ended')
})

t.test('bounded in bytes: the oldest windows go first', async (t) => {
  const w = new MemoryWindow(1, 60_000, 20_000)
  for (let i = 0; i < 1000; i++) w.hit(`10.0.${i >> 8}.${i & 255}`, 0)
  t.ok(w.size < 200, `${w.size} windows kept`)
})

const redisUrl = process.env.REDIS_URL_TEST
t.test('Redis: the signup window is shared and says how long to wait', { skip: redisUrl ? false : 'REDIS_URL_TEST unset' }, async (t) => {
  const r = new Redis(redisUrl!)
  t.teardown(() => r.quit())
  const prefix = `gjt-su-${process.pid}-${Date.now()}`
  const a = new RedisSignupThrottle(r, prefix)
  const b = new RedisSignupThrottle(r, prefix) // another node
  for (let i = 0; i < SIGNUPS_PER_HOUR; i++) t.equal(await (i % 2 ? a : b).take('192.0.2.7'), 0)
  const wait = await a.take('192.0.2.7')
  t.ok(wait > 3500 && wait <= 3600, `then ${wait} s`)
  t.equal(await b.take('192.0.2.8'), 0, 'another address')
  t.equal(await r.get(`${prefix}:su:192.0.2.7`), String(SIGNUPS_PER_HOUR), 'a refused signup is not counted')
})
