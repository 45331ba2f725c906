// A provider callback that comes while its job is still being created (submitted upstream, its
// commit not returned yet; docs/providers.md "Callbacks"): the account's LiveJobs holds it until
// the creation settles, then the job takes it as any live job would. Before, the shard answered
// 'unmatched' at once and the front end went to the database for a row not committed yet.
import t from 'tap'
import { LiveJobs, type JobsOwner } from '../../src/shard/live-jobs.js'
import { Mailbox } from '../../src/shard/mailbox.js'
import type { JobActor } from '../../src/shard/job-actor.js'
import type { UpstreamState } from '../../src/providers/provider.js'

function account (): LiveJobs {
  const owner = { id: 7, deps: {}, mailbox: new Mailbox(), state: null } as unknown as JobsOwner
  return new LiveJobs(owner)
}

/** A live job as the callback path sees it: its upstream handle and what it was poked with. */
function liveJob (upstreamId: string) {
  const poked: Array<UpstreamState | undefined> = []
  return { job: { handle: { id: upstreamId }, poke: (s?: UpstreamState) => { poked.push(s) } } as unknown as JobActor, poked }
}

const turn = () => new Promise(resolve => setImmediate(resolve))
const done: UpstreamState = { state: 'succeeded', outputs: ['https://cdn.example/a.png'] }

t.test('a callback during the creation waits, then the adopted job takes it', async (t) => {
  const live = account()
  live.creatingJob('job_a')
  let outcome: string | null = null
  const answered = live.callback('job_a', done, undefined, 'up_1').then(o => { outcome = o })
  await turn()
  await turn()
  t.equal(outcome, null, 'not answered while the creation is under way')
  const { job, poked } = liveJob('up_1')
  live.jobs.set('job_a', job) // adopted once its commit returned
  live.createdJob('job_a')
  await answered
  t.equal(outcome, 'live')
  t.same(poked, [done], 'the job got the callback\'s state')
})

t.test('two callbacks during one creation are both taken, in order', async (t) => {
  const live = account()
  live.creatingJob('job_b')
  const one = live.callback('job_b', done, undefined, 'up_2')
  const two = live.callback('job_b', undefined, undefined, 'up_2')
  const { job, poked } = liveJob('up_2')
  live.jobs.set('job_b', job)
  live.createdJob('job_b')
  t.same(await Promise.all([one, two]), ['live', 'live'])
  t.same(poked, [done, undefined])
})

t.test('a creation that did not run its job (refused, not committed) answers unmatched: the front end looks it up', async (t) => {
  const live = account()
  live.creatingJob('job_c')
  const held = live.callback('job_c', done, undefined, 'up_3')
  live.createdJob('job_c')
  t.equal(await held, 'unmatched')
})

t.test('another upstream id than the adopted job holds is unmatched; a job not being created answers at once', async (t) => {
  const live = account()
  live.creatingJob('job_d')
  const held = live.callback('job_d', done, undefined, 'up_other')
  const { job, poked } = liveJob('up_4')
  live.jobs.set('job_d', job)
  live.createdJob('job_d')
  t.equal(await held, 'unmatched')
  t.same(poked, [], 'the job was not touched')
  t.equal(await live.callback('job_e', done, undefined, 'up_5'), 'unmatched', 'no creation under way: no wait')
})
