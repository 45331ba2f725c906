// AttemptWriter (src/webhooks/delivery-attempts.ts): attempts are recorded in batches, a batch the
// database could not take is written again instead of dropped (a dropped one lets the claim
// lapse and the receiver gets the delivery twice), and a bad row never fails the others.
import t from 'tap'
import { AttemptWriter, RECORD_BATCH } from '../../src/webhooks/delivery-attempts.js'
import type { AttemptRecord } from '../../src/db/webhooks.js'

const attempt = (id: string, attemptedAt = new Date()): AttemptRecord => ({
  deliveryId: id, webhookId: null, attempt: 1, attemptedAt, statusCode: 200, latencyMs: 1, error: null,
  status: 'delivered', delayMs: null, disableWebhook: null,
})
const unavailable = (err: unknown) => (err as { code?: string })?.code === '53300'
const tooMany = () => Object.assign(new Error('sorry, too many clients already'), { code: '53300' })

t.test('attempts finishing together are one statement; while requests are in flight a batch waits for more', async (t) => {
  const batches: number[] = []
  let busy = true
  const w = new AttemptWriter({ batch: async l => { batches.push(l.length) }, one: async () => {}, busy: () => busy, unavailable, retryForMs: 30_000 })
  await Promise.all(Array.from({ length: RECORD_BATCH + 8 }, (_, i) => w.record(attempt(`a${i}`))))
  t.same(batches, [RECORD_BATCH + 8], 'one statement for a turn\'s attempts')
  const p = [w.record(attempt('b1'))]
  await new Promise(resolve => setImmediate(resolve))
  p.push(w.record(attempt('b2')), w.record(attempt('b3')))
  await Promise.all(p)
  t.same(batches, [RECORD_BATCH + 8, 3], 'attempts arriving within the wait join one batch')
  busy = false
  await w.record(attempt('c1'))
  t.same(batches, [RECORD_BATCH + 8, 3, 1], 'nothing in flight: written at once')
})

t.test('a batch refused because the database is unreachable is written again, not dropped', async (t) => {
  let calls = 0
  let ones = 0
  const w = new AttemptWriter({
    batch: async () => { if (++calls <= 2) throw tooMany() },
    one: async () => { ones++ },
    busy: () => false, unavailable, retryForMs: 30_000,
  })
  await Promise.all([w.record(attempt('x1')), w.record(attempt('x2'))])
  t.equal(calls, 3, 'written on the third try')
  t.equal(ones, 0, 'not split into rows')
  t.equal(w.stats.retries, 2)
  t.equal(w.stats.attempts, 2)
})

t.test('past retryForMs, or for a bad row, the batch is written row by row: only the bad row fails', async (t) => {
  const w = new AttemptWriter({
    batch: async () => { throw tooMany() },
    one: async (a) => { if (a.deliveryId === 'bad') throw new Error('bad row') },
    busy: () => false, unavailable, retryForMs: 150,
  })
  const old = new Date(Date.now() - 1000)
  const results = await Promise.allSettled([w.record(attempt('ok1', old)), w.record(attempt('bad', old)), w.record(attempt('ok2', old))])
  t.same(results.map(r => r.status), ['fulfilled', 'rejected', 'fulfilled'])
  t.equal(w.stats.retries, 0, 'an attempt older than retryForMs is not retried as a batch')
  const w2 = new AttemptWriter({
    batch: async () => { throw new Error('value too long') },
    one: async (a) => { if (a.deliveryId === 'bad') throw new Error('bad row') },
    busy: () => false, unavailable, retryForMs: 30_000,
  })
  const r2 = await Promise.allSettled([w2.record(attempt('ok1')), w2.record(attempt('bad'))])
  t.same(r2.map(r => r.status), ['fulfilled', 'rejected'], 'a statement error is not retried: rows go one by one')
  t.equal(w2.stats.retries, 0)
})
