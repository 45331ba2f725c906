// Idle account actors leave their shard (src/shard/eviction.ts) and come back cold
// from PostgreSQL: balance, free trial, idempotency replays and conflicts are as before.
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { ActorTable, quiescent, type ActorUse } from '../../src/shard/eviction.js'
import { startServer, createUser, type TestServer, type TestUser } from '../helpers/server.js'
import { balance, FAST_ENV, image, paidUser, pollJob, video } from '../helpers/jobs.js'
import { settled, waitFor } from '../helpers/wait.js'

interface Fake extends ActorUse { id: number; mailbox: { size: number }; jobs: { size: number }; slots: { idle: boolean } }
const fake = (id: number): Fake => ({
  id, busy: 0, usedAt: 0, mailbox: { size: 0 }, jobs: { size: 0 }, held: { credits: 0, trialVideos: 0 }, slots: { idle: true },
})

t.test('only a quiescent actor unused for idleMs is dropped', async (t) => {
  let now = 0
  const table = new ActorTable(fake, 1000, () => now)
  const ids = [1, 2, 3, 4, 5, 6]
  for (const id of ids) table.get(id)
  table.get(2).mailbox.size = 1 // a message queued
  table.get(3).jobs.size = 1 // a live job
  table.get(4).held.credits = 10 // a creation decided, not committed
  table.get(5).held.trialVideos = 1
  table.get(6).slots.idle = false // a slot pending
  now = 999
  t.equal(table.sweep(), 0, 'nothing before idleMs')
  now = 1000
  t.equal(table.sweep(), 1, 'only the quiescent one')
  t.same([...table.actors.keys()], [2, 3, 4, 5, 6])
  for (const id of [2, 3, 4, 5, 6]) t.notOk(quiescent(table.actors.get(id)!), `actor ${id} is busy`)
  t.equal(table.evicted, 1)
  // A message in progress keeps its actor however long it takes.
  let release!: () => void
  const pending = table.use(7, () => new Promise<void>(resolve => { release = resolve }))
  now = 10_000
  t.equal(table.sweep(), 0, 'busy while a message is answered')
  release()
  await pending
  t.equal(table.sweep(), 0, 'the answer counts as a use')
  now = 11_000
  t.equal(table.sweep(), 1)
  t.notOk(table.actors.has(7))
  const again = table.get(7)
  t.equal(again.busy, 0, 'a new actor, built cold')
})

/** The shards' actor counts from their stats (genjobs_thread_structure_size). */
async function actorCounts (s: TestServer): Promise<{ actors: number; evicted: number }> {
  const stats = await s.app.services.shards.stats()
  let actors = 0
  let evicted = 0
  for (const st of stats) { actors += st.sizes.account_actors ?? 0; evicted += st.sizes.actors_evicted ?? 0 }
  return { actors, evicted }
}

/** Waits until every actor is gone from the shards (the sweep runs every second with ACTOR_IDLE_S=1). */
async function allEvicted (s: TestServer): Promise<number> {
  let c = { actors: -1, evicted: 0 }
  await waitFor(async () => (c = await actorCounts(s)).actors === 0, { what: () => `every actor evicted (${JSON.stringify(c)})`, timeoutMs: 20_000, everyMs: 100 })
  return c.evicted
}

t.test('after eviction: balance, trial, idempotency replay and conflict are what the database says', async (t) => {
  const s = await startServer(t, { ...FAST_ENV, ACTOR_IDLE_S: '1' })
  const u = await paidUser(s, 1000)
  const free: TestUser = await createUser(s, { credits: 200 }) // the trial grant, no purchase
  const k = `idem-${randomBytes(8).toString('hex')}`
  const first = await s.req('POST', '/v1/generate/image', { key: u.key, body: image(), headers: { 'idempotency-key': k } })
  t.equal(first.status, 201)
  await pollJob(s, u, first.body.id)
  const trial = await s.req('POST', '/v1/generate/video', { key: free.key, body: video() })
  t.equal(trial.status, 201, 'the trial video')
  await pollJob(s, free, trial.body.id)
  const before = await balance(s, u)

  const evicted = await allEvicted(s)
  t.ok(evicted >= 2, `${evicted} actors evicted, none left`)

  t.equal(await balance(s, u), before, 'balance reloaded from the table')
  const replay = await s.req('POST', '/v1/generate/image', { key: u.key, body: image(), headers: { 'idempotency-key': k } })
  t.equal(replay.status, 200, 'replayed after eviction')
  t.equal(replay.body.id, first.body.id, 'the original job')
  t.equal(replay.body.remaining_credits, before)
  const conflict = await s.req('POST', '/v1/generate/image', { key: u.key, body: image('another prompt'), headers: { 'idempotency-key': k } })
  t.equal(conflict.status, 409, 'same key, other body: conflict')
  t.equal(conflict.body.code, 'IDEMPOTENCY_CONFLICT')
  t.equal(await balance(s, u), before, 'nothing charged')
  await allEvicted(s)
  const second = await s.req('POST', '/v1/generate/video', { key: free.key, body: video('another one') })
  t.equal(second.status, 403, 'the trial video stays used')
  t.equal(second.body.code, 'upgrade_required')
  const next = await s.req('POST', '/v1/generate/image', { key: u.key, body: image('a new one') })
  t.equal(next.status, 201)
  t.equal(next.body.remaining_credits, before - next.body.credits_charged, 'charged from the reloaded balance')
})

t.test('an actor with a job running is kept', async (t) => {
  // SIM_SPEED=1: a video takes its estimated time, far longer than the 1 s idle bound.
  const s = await startServer(t, { ...FAST_ENV, SIM_SPEED: '1', ACTOR_IDLE_S: '1' })
  const u = await paidUser(s, 1000)
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: video() })
  t.equal(r.status, 201)
  const other = await paidUser(s, 10)
  t.equal((await s.req('GET', '/v1/credits', { key: other.key })).status, 200)
  // The other account's actor goes; the one running a job stays.
  const c = await settled(() => actorCounts(s), c => c.evicted >= 1, { timeoutMs: 20_000, everyMs: 100 })
  t.ok(c.evicted >= 1, 'the idle actor was evicted')
  t.equal(c.actors, 1, 'the actor running a job stays')
  const job = await s.req('GET', `/v1/jobs/${r.body.id}`, { key: u.key })
  t.notOk(['completed', 'failed', 'cancelled'].includes(job.body.status), 'still running')
  const cancel = await s.req('DELETE', `/v1/jobs/${r.body.id}`, { key: u.key })
  t.ok(cancel.status < 300 || cancel.status === 409, `cancel answered ${cancel.status}`)
})
