// The simulated provider as one route kind:
// it stays the default; a [sim:queue] job waits as long as it takes (the deadline counts only
// once a provider holds the job); simulated routes in PROVIDERS_FILE get caps and history.
import { mkdtemp, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { UNLIMITED_TIERS, balance, dbOf, paidUser, pollJob } from '../helpers/jobs.js'
import { sleep } from '../helpers/wait.js'
import { startServer } from '../helpers/server.js'

const dir = await mkdtemp(join(tmpdir(), 'gjt-simroutes-'))
const file = join(dir, 'providers.json')
await writeFile(file, JSON.stringify({ routes: { 'veo3-fast': [{ provider: 'simulated', max_concurrent: 1 }] } }))
// SIM_SPEED 2000: nano-banana's deadline is max(4 x 15 s, 600 s) / 2000 = 0.3 s after submission.
const s = await startServer(t, { SIM_SPEED: '2000', SHARDS: '1', SUBMIT_TIMEOUT_MS: '300', TIER_LIMITS: UNLIMITED_TIERS, PROVIDERS_FILE: file })
const sql = dbOf(t, s)
const u = await paidUser(s, 100_000)

t.test('[sim:queue] stays queued past any deadline until cancelled, then is refunded', async (t) => {
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'wait [sim:queue]' } })
  t.equal(r.status, 201, r.text)
  t.equal(r.body.status, 'queued')
  await sleep(1500) // time: proves the job stays queued past five times the deadline a submitted job would get
  const mid = await s.req('GET', `/v1/jobs/${r.body.id}`, { key: u.key })
  t.equal(mid.body.status, 'queued', 'still queued: the deadline only runs while a provider holds the job')
  const before = await balance(s, u)
  const del = await s.req('DELETE', `/v1/jobs/${r.body.id}`, { key: u.key })
  t.equal(del.status, 200, del.text)
  t.equal(del.body.status, 'cancelled')
  t.equal(await balance(s, u) - before, r.body.credits_charged, 'refunded')
})

t.test('the default simulated route still runs every model not in the file, with its directives', async (t) => {
  const ok = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'an apple' } })
  t.equal(ok.status, 201, ok.text)
  const { job } = await pollJob(s, u, ok.body.id, { timeoutMs: 5000 })
  t.equal(job.status, 'completed')
  const a = await s.req('GET', `/v1/admin/jobs/${ok.body.id}`, { admin: true })
  t.equal(a.body.provider, 'simulated')
  t.match(a.body.upstream, { id: /^sim_/ })
  const rej = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'no [sim:reject]' } })
  t.equal(rej.status, 502)
  t.equal(rej.body.code, 'PROVIDER_ERROR')
  const fail = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'boom [sim:fail]' } })
  t.equal((await pollJob(s, u, fail.body.id, { timeoutMs: 5000 })).job.status, 'failed')
  const pol = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'bad [sim:policy]' } })
  const pj = (await pollJob(s, u, pol.body.id, { timeoutMs: 5000 })).job
  t.equal(pj.status, 'failed')
  t.equal(pj.content_policy_violation, true)
  const to = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'slow [sim:timeout]' } })
  t.equal(to.status, 504)
  const tj = (await pollJob(s, u, to.body.details.job_id, { timeoutMs: 5000 })).job
  t.equal(tj.status, 'failed', 'a submission that never answers fails at its deadline, refunded')
  t.equal(tj.credits_refunded, tj.credits_charged)
})

t.test('a simulated route with max_concurrent 1: the second job queues, runs after the first, history kept', async (t) => {
  const a = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'veo3-fast', prompt: 'first' } })
  const b = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'veo3-fast', prompt: 'second' } })
  t.equal(a.body.status, 'submitted', a.text)
  t.equal(b.body.status, 'queued', 'route full')
  const h = await s.req('GET', '/v1/admin/providers', { admin: true })
  t.match(h.body.providers, [{ model: 'veo3-fast', provider: 'simulated', in_flight: 1, queued: 1, max_concurrent: 1 }])
  const ja = (await pollJob(s, u, a.body.id, { timeoutMs: 5000 })).job
  const jb = (await pollJob(s, u, b.body.id, { timeoutMs: 5000 })).job
  t.equal(ja.status, 'completed')
  t.equal(jb.status, 'completed')
  const adm = await s.req('GET', `/v1/admin/jobs/${b.body.id}`, { admin: true })
  t.match(adm.body.route, /^veo3-fast#0:simulated:/)
  const sources = adm.body.upstream_events.map((e: any) => `${e.source}:${e.state}`)
  t.ok(sources.includes('submit:submitted') && sources.includes('stored:succeeded'), `history: ${sources.join(', ')}`)
  t.ok(new Date(adm.body.submitted_at) >= new Date(ja.completed_at), 'submitted only once the first job ended')
})

t.test('ledger: one charge per job, one refund per failed/cancelled job, nothing stuck', async (t) => {
  const bad = await sql`
    SELECT j.id FROM jobs j
    LEFT JOIN credit_entries c ON c.job_id = j.id AND c.kind = 'charge'
    LEFT JOIN credit_entries r ON r.job_id = j.id AND r.kind = 'refund'
    GROUP BY j.id, j.status
    HAVING count(DISTINCT c.id) <> 1 OR count(DISTINCT r.id) <> (CASE WHEN j.status IN ('failed', 'cancelled') THEN 1 ELSE 0 END)`
  t.same(bad, [])
  t.same(await sql`SELECT id FROM jobs WHERE status IN ('queued', 'submitted', 'processing')`, [])
})
