// A creation whose commit outcome is unknown (the database went away mid-commit;
// src/shard/creation.ts settleUnknownCreation): once a read answers, a recorded job is handed
// on to run and an absent one's upstream job is cancelled; while reads fail nothing is decided.
import t from 'tap'
import { settleUnknownCreation } from '../../src/shard/creation.js'

const quiet = () => {}

t.test('absent: decided once the database answers again', async (t) => {
  let reads = 0
  const seen: string[] = []
  const outcome = await settleUnknownCreation(async () => { if (++reads < 3) throw new Error('database away'); return undefined },
    () => seen.push('run'), () => seen.push('cancel'), quiet, [1, 1], 60_000)
  t.equal(outcome, 'absent')
  t.same(seen, ['cancel'])
  t.equal(reads, 3, 'read again after each failure')
})

t.test('recorded: the row is handed on (the shard runs the job), nothing cancelled', async (t) => {
  const seen: unknown[] = []
  const outcome = await settleUnknownCreation(async () => ({ id: 'job_1' }), (r) => seen.push(r), () => seen.push('cancel'), quiet, [1], 60_000)
  t.equal(outcome, 'recorded')
  t.same(seen, [{ id: 'job_1' }])
})

t.test('still unknown after the look window: nothing decided, and said so', async (t) => {
  const seen: string[] = []
  const logged: string[] = []
  const outcome = await settleUnknownCreation(async () => { throw new Error('database away') }, () => seen.push('run'), () => seen.push('cancel'),
    (_l, msg) => { logged.push(msg) }, [1, 2], 20)
  t.equal(outcome, 'unknown')
  t.same(seen, [])
  t.match(logged, [/still unknown/])
})
