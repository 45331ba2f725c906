// FRONTENDS=2 with compact progress events (job-lifecycle): a job's progress ticks
// cross from its shard to the main thread as `job.progress` and on to the other front-end
// threads as `t: 'prog'`; each thread patches its own cached view, so the SSE streams held by
// every thread see the same status events, progress ticks included.
import t from 'tap'
import { startServer } from '../../helpers/server.js'
import { paidUser, UNLIMITED_TIERS } from '../../helpers/jobs.js'
import { openSse, type SseStream } from '../../helpers/sse.js'

const s = await startServer(t, { FRONTENDS: '2', SIM_SPEED: '10', TIER_LIMITS: UNLIMITED_TIERS, SSE_HEARTBEAT_MS: '60000' })

t.test('streams on both threads see every progress event of the job', async (t) => {
  const u = await paidUser(s, 1000)
  // nano-banana (15 s) at SIM_SPEED 10: 1.5 s, about 9 progress changes.
  const c = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a harbour at night' } })
  t.equal(c.status, 201)
  const streams: SseStream[] = await Promise.all(Array.from({ length: 12 }, () => openSse(`${s.url}/v1/sse/jobs/${c.body.id}`, { 'x-api-key': u.key })))
  t.ok(streams.every(st => st.status === 200))
  const mine = s.app.services.sse.size
  const others = (await s.app.frontends!.stats()).reduce((n, f) => n + f.sseOpen, 0)
  t.ok(mine > 0 && others > 0, `streams held by both threads (${mine} + ${others})`)
  await Promise.all(streams.map(st => st.closed))
  // Each stream opened at its own moment: compare what all of them saw after the last one opened.
  const seqs = streams.map(st => st.events.filter(e => e.event === 'status').map(e => `${e.id} ${e.data}`))
  const from = Math.max(...seqs.map(q => Number(q[0].split(' ')[0])))
  const tails = seqs.map(q => q.filter(x => Number(x.split(' ')[0]) >= from))
  for (const q of tails) t.same(q, tails[0], 'the same status events on every stream')
  const progress = tails[0].map(x => JSON.parse(x.slice(x.indexOf(' ') + 1))).filter(d => d.status === 'processing')
  t.ok(progress.length >= 3, `${progress.length} processing events with progress (${progress.map(d => d.progress).join(',')})`)
  t.equal(JSON.parse(tails[0][tails[0].length - 1].split(' ').slice(1).join(' ')).status, 'completed')
})
