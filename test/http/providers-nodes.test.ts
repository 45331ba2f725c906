// Callbacks on any node (docs/architecture.md "A provider callback"): two nodes share one database; a job runs on
// node A, its provider calls back node B. B verifies, settles the job through the conditional
// terminal transition, and A's own copy later finds it ended: exactly one completion, one charge,
// no refund; a restart of A resumes a submitted job on its route and completes it by polling.
import { randomBytes } from 'node:crypto'
import { mkdtemp, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { startFalStub } from '../fixtures/fal-stub.js'
import { UNLIMITED_TIERS, dbOf, paidUser, pollJob } from '../helpers/jobs.js'
import { sleep, waitFor } from '../helpers/wait.js'
import { startServer } from '../helpers/server.js'
import { freePort } from '../helpers/net.js'

const fal = await startFalStub()
t.teardown(() => fal.close())
const dir = await mkdtemp(join(tmpdir(), 'gjt-nodes-'))
const file = join(dir, 'providers.json')
// Reconciliation polls 5 s after submission (not at the model's estimate): node A's own poll finds what node B settled.
await writeFile(file, JSON.stringify({ providers: { fal: { reconcile_after_s: 1 } }, routes: { 'nano-banana': [{ provider: 'fal', model: 'fal-ai/nano-banana' }] } }))
const env = (port: number) => ({
  PORT: String(port),
  PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
  SHARDS: '1',
  TIER_LIMITS: UNLIMITED_TIERS,
  PROVIDERS_FILE: file,
  FAL_KEY: fal.key,
  FAL_QUEUE_URL: fal.url,
  FAL_JWKS_URL: fal.jwksUrl,
  WEBHOOK_ALLOWLIST: new URL(fal.url).host,
  REDIS_PREFIX: `gjt${randomBytes(4).toString('hex')}`,
})
const pa = await freePort()
const a = await startServer(t, env(pa))
const pb = await freePort()
const b = await startServer(t, { ...env(pb), DATABASE_URL: a.databaseUrl })
const sql = dbOf(t, a)
const u = await paidUser(a, 10_000)

t.test('a callback that reaches the node not running the job completes it exactly once', async (t) => {
  fal.plan({ steps: ['running'], outcome: 'succeeded', media: 'png', finishAfterMs: null, callback: false })
  const r = await a.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'cross node' } })
  t.equal(r.status, 201, r.text)
  const [row] = await sql`SELECT owner, provider_job_id FROM jobs WHERE id = ${r.body.id}`
  t.ok(row.owner, 'leased to node A')
  fal.finish(row.provider_job_id)
  const rec = await fal.deliver(row.provider_job_id, { url: `http://127.0.0.1:${pb}/v1/providers/fal/callback` })
  t.equal(rec.status, 200, 'node B verified the callback')
  const { job } = await pollJob(b, u, r.body.id, { timeoutMs: 3000, everyMs: 50 })
  t.equal(job.status, 'completed', 'settled by node B well before A polls again (5 s)')
  t.ok(job.result_url.startsWith(`http://127.0.0.1:${pb}/files/results/`), 'stored by the node that settled it')
  // A's own JobActor polls, finds it ended, and its read cache follows.
  const fromA = await pollJob(a, u, r.body.id, { timeoutMs: 9000, everyMs: 200 })
  t.equal(fromA.job.status, 'completed', 'node A sees the terminal job')
  await sleep(200) // time: proves node A's copy adds no refund within a window after it saw the end
  const entries = await sql`SELECT kind FROM credit_entries WHERE job_id = ${r.body.id} ORDER BY id`
  t.same(entries.map((e: any) => e.kind), ['charge'], 'one charge, no refund')
  const [{ n }] = await sql`SELECT count(*)::int AS n FROM images WHERE job_id = ${r.body.id}`
  t.equal(n, 1, 'one library image')
  const late = await sql`SELECT 1 FROM job_upstream_events WHERE job_id = ${r.body.id} AND source = 'late'`
  t.equal(late.length, 0, 'a completion by the other node is not a "late success"')
})

t.test('a job settled on the other node while this node cannot poll its provider: the next lease renewal shows the stored end', async (t) => {
  fal.plan({ steps: ['running'], outcome: 'succeeded', media: 'png', finishAfterMs: null, callback: false })
  const r = await a.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'cross node, status down' } })
  t.equal(r.status, 201, r.text)
  const [row] = await sql`SELECT provider_job_id FROM jobs WHERE id = ${r.body.id}`
  // Node A's polls all fail from now on: only its lease renewal (every 10 s) can learn the end.
  fal.fault({ route: 'status', status: 503, times: 1_000_000 })
  t.teardown(() => { fal.faults.length = 0 })
  fal.finish(row.provider_job_id)
  const rec = await fal.deliver(row.provider_job_id, { url: `http://127.0.0.1:${pb}/v1/providers/fal/callback` })
  t.equal(rec.status, 200, 'node B verified the callback')
  const { job } = await pollJob(b, u, r.body.id, { timeoutMs: 3000, everyMs: 50 })
  t.equal(job.status, 'completed', 'settled by node B')
  // Before the fix node A dropped its copy at renewal and kept answering "submitted" forever.
  const fromA = await pollJob(a, u, r.body.id, { timeoutMs: 20_000, everyMs: 200 })
  t.equal(fromA.job.status, 'completed', 'node A shows the terminal job')
  t.equal(fromA.job.result_url, job.result_url, 'with the result node B stored')
})

t.test('a shard crash: the submitted job resumes on its route with its stored handle and completes by polling', async (t) => {
  fal.plan({ steps: ['running'], outcome: 'succeeded', media: 'png', finishAfterMs: null, callback: false })
  const r = await a.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'survives a crash' } })
  t.equal(r.status, 201, r.text)
  const [row] = await sql`SELECT provider_job_id, route, upstream FROM jobs WHERE id = ${r.body.id}`
  t.match(row, { route: /^nano-banana#0:fal:/, upstream: { id: row.provider_job_id } }, 'route and handle stored with the job')
  const restarts = a.app.services.shards.restarts
  await a.app.services.shards.crash(0)
  await waitFor(() => a.app.services.shards.restarts !== restarts, { what: 'shard 0 to restart' })
  await a.app.services.shards.ready() // a shard is ready once its startup claim has resumed its jobs
  fal.finish(row.provider_job_id) // no callback: only the resumed JobActor's polling can see it
  const { job } = await pollJob(a, u, r.body.id, { timeoutMs: 8000, everyMs: 50 })
  t.equal(job.status, 'completed')
  const ev = await sql`SELECT source, state FROM job_upstream_events WHERE job_id = ${r.body.id} ORDER BY id`
  t.ok(ev.some((e: any) => e.source === 'poll' && e.state === 'succeeded'), 'completed by the resumed actor\'s poll')
  t.equal([...fal.jobs.values()].filter(j => j.input.prompt === 'survives a crash').length, 1, 'never submitted twice')
  const entries = await sql`SELECT kind FROM credit_entries WHERE job_id = ${r.body.id}`
  t.same(entries.map((e: any) => e.kind), ['charge'])
})
