// Reads of waiting jobs' rows (docs/architecture.md "Waiting jobs"): one SELECT per event-loop turn.
import t from 'tap'
import type { JobRow } from '../../src/jobs/view.js'
import { RowReads } from '../../src/shard/row-reads.js'

const rowOf = (id: string): JobRow => ({ id }) as unknown as JobRow

t.test('the reads of one turn go as one batch; a missing row is undefined; the same id twice is read once', async (t) => {
  const batches: string[][] = []
  const reads = new RowReads(async (ids) => { batches.push(ids); return ids.filter(i => i !== 'job_gone').map(rowOf) })
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
  const reads = new RowReads(async (ids) => { if (fail) throw new Error('database away'); return ids.map(rowOf) })
  const results = await Promise.allSettled([reads.get('job_a'), reads.get('job_b')])
  t.same(results.map(r => r.status), ['rejected', 'rejected'])
  fail = false
  t.equal((await reads.get('job_a'))?.id, 'job_a', 'the next batch reads again')
})
