// Reads batched per event-loop turn (src/shard/turn-reads.ts): waiting jobs' rows
// (docs/architecture.md "Waiting jobs") and Idempotency-Keys ("Idempotency keys").
import t from 'tap'
import type { JobRow } from '../../src/jobs/view.js'
import { TurnReads } from '../../src/shard/turn-reads.js'

const rowOf = (id: string): JobRow => ({ id }) as unknown as JobRow

t.test('the reads of one turn go as one batch; a missing row is undefined; the same id twice is read once', async (t) => {
  const batches: string[][] = []
  const reads = new TurnReads<JobRow>(async (ids) => { batches.push(ids); return ids.filter(i => i !== 'job_gone').map(rowOf) }, r => r.id)
  const [a, b, again, gone] = await Promise.all([reads.get('job_a'), reads.get('job_b'), reads.get('job_a'), reads.get('job_gone')])
  t.equal(a?.id, 'job_a')
  t.equal(b?.id, 'job_b')
  t.equal(again, a, 'both callers of job_a get its row')
  t.equal(gone, undefined)
  t.same(batches, [['job_a', 'job_b', 'job_gone']], 'one read for the turn')
  t.equal((await reads.get('job_c'))?.id, 'job_c')
  t.equal(batches.length, 2, 'a later turn is a new read')
})

t.test('a failed read rejects every caller of its batch, and only them', async (t) => {
  let fail = true
  const reads = new TurnReads<JobRow>(async (ids) => { if (fail) throw new Error('database away'); return ids.map(rowOf) }, r => r.id)
  const results = await Promise.allSettled([reads.get('job_a'), reads.get('job_b')])
  t.same(results.map(r => r.status), ['rejected', 'rejected'])
  fail = false
  t.equal((await reads.get('job_a'))?.id, 'job_a', 'the next batch reads again')
})

t.test('rows are matched to callers by keyOf, in whatever order the read answers', async (t) => {
  const reads = new TurnReads<{ pair: string; id: string }>(async (pairs) => pairs.filter(p => p !== '2 k').reverse().map(p => ({ pair: p, id: `job_${p.replace(' ', '_')}` })), r => r.pair)
  const [a, b, c] = await Promise.all([reads.get('1 k'), reads.get('2 k'), reads.get('1 other')])
  t.equal(a?.id, 'job_1_k')
  t.equal(b, undefined, 'the same key of another account is another pair')
  t.equal(c?.id, 'job_1_other')
})
