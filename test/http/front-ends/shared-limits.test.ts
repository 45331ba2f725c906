// The shared-memory counters of the front-end threads (src/http/front-ends/shared-limits.ts): the same
// window as the single-thread RateLimiter, exact under real threads, collisions and a full
// table handled without ever admitting an uncounted request.
import t from 'tap'
import { Worker } from 'node:worker_threads'
import { RateLimiter } from '../../../src/http/rate-limit.js'
import { createSharedLimits, SharedRateLimiter, SharedStreamCounts } from '../../../src/http/front-ends/shared-limits.js'
import { SharedTable } from '../../../src/threads/shared-table.js'

const T0 = 1_700_000_000_000

t.test('SharedRateLimiter decides exactly as RateLimiter on a random sequence', async (t) => {
  const a = new RateLimiter()
  t.teardown(() => a.close())
  const b = new SharedRateLimiter(createSharedLimits(64, 8).rate)
  let seed = 7
  const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed / 0x7fffffff }
  let now = T0
  let refused = 0
  for (let i = 0; i < 20_000; i++) {
    now += Math.floor(rnd() * 400)
    const bucket = ['k1', 'k2', 'a3', 'u4', 'k12345678901'][Math.floor(rnd() * 5)]
    const x = a.take(bucket, 25, now)
    const y = b.take(bucket, 25, now)
    if (x !== y) { t.fail(`step ${i} ${bucket}: ${x} vs ${y}`); return }
    if (x < 0) refused++
  }
  t.ok(refused > 1000, `both refused the same ${refused} requests`)
})

t.test('keys that share a home slot keep their own counts; a full table refuses, then reuses expired windows', async (t) => {
  const init = createSharedLimits(4, 4).rate
  const rl = new SharedRateLimiter(init)
  for (let k = 1; k <= 4; k++) t.equal(rl.take(`k${k}`, 2, T0), 1, `k${k}: its own window`)
  for (let k = 1; k <= 4; k++) t.equal(rl.take(`k${k}`, 2, T0), 0, `k${k}: second request counted in its own slot`)
  t.equal(rl.size(T0), 4)
  t.equal(rl.take('k5', 2, T0 + 1000), -1, 'table full: refused (Retry-After 1 s), not admitted uncounted')
  t.equal(rl.overflows, 1)
  t.ok(rl.take('k1', 2, T0 + 1000) < 0, 'k1 is still limited')
  t.equal(rl.take('k5', 2, T0 + 61_000), 1, 'an expired window is handed to the new key')
  t.equal(rl.take('k1', 2, T0 + 61_000), 1, 'k1 starts a fresh window')
  t.equal(rl.size(T0 + 61_000), 2)
  // One slot per key even when the table holds one key only.
  const tiny = new SharedTable(SharedTable.create(1, 1))
  t.equal(tiny.with(1, 9, () => false, (c, b) => ++c[b], -1), 1)
  t.equal(tiny.with(1, 10, () => false, (c, b) => ++c[b], -1), -1, 'the other key does not share the slot')
  t.equal(tiny.with(1, 9, () => false, (c, b) => ++c[b], -1), 2)
})

t.test('stream counts: max per account, full table refuses', async (t) => {
  const sc = new SharedStreamCounts(createSharedLimits(4, 2).streams)
  t.ok(sc.reserve(1, 2))
  t.ok(sc.reserve(1, 2))
  t.notOk(sc.reserve(1, 2), 'at max')
  t.ok(sc.reserve(2, 2))
  t.notOk(sc.reserve(3, 2), 'table of two accounts full: refused')
  sc.release(2, 1)
  t.ok(sc.reserve(3, 2), 'an account with no stream left frees its slot')
  t.equal(sc.open(1), 2)
})

t.test('four threads hammering one key admit exactly the limit', async (t) => {
  const limits = createSharedLimits(256, 8)
  const url = new URL('../../../src/http/front-ends/shared-limits.js', import.meta.url).href
  const code = `
    const { workerData, parentPort } = require('node:worker_threads')
    import(workerData.url).then(({ SharedRateLimiter }) => {
      const rl = new SharedRateLimiter(workerData.rate)
      // Start together: each thread counts itself in, then waits for the other three.
      const gate = new Int32Array(workerData.gate)
      Atomics.add(gate, 0, 1)
      while (Atomics.load(gate, 0) < 4) Atomics.wait(gate, 1, 0, 1)
      let ok = 0
      const now = Date.now()
      for (let i = 0; i < 20000; i++) { if (rl.take('k77', 30000, now) >= 0) ok++; if (i % 7 === 0) rl.take('k' + (i % 50), 1e9, now) }
      parentPort.postMessage(ok)
    })`
  const gate = new SharedArrayBuffer(8)
  const counts = await Promise.all([0, 1, 2, 3].map(() => new Promise<number>((resolve, reject) => {
    const w = new Worker(code, { eval: true, workerData: { url, rate: limits.rate, gate } })
    w.once('message', resolve)
    w.once('error', reject)
  })))
  t.equal(counts.reduce((a, b) => a + b, 0), 30000, `admitted ${counts.join(' + ')} of 80000 tries: exactly the limit`)
  t.ok(counts.filter(n => n > 0).length >= 2, 'the threads contended for the key')
})
