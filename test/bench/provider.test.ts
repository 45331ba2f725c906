// The provider scenarios' moving parts: the fal stub's hold mode and control endpoint (held
// jobs answer IN_PROGRESS and call back only when released, paced or bounded), and the
// provider baseline written the usual way (bench/baselines/fastify-provider.ts): it charges,
// submits to the stub with its webhook URL, refuses a forged callback, and completes a job by
// its signed callback with the result downloaded, the library row and (webhook accounts only)
// the outbox row written.
import { createServer } from 'node:http'
import t from 'tap'
import { startBaseline, startFalStubProcess } from '../../bench/lib/children.js'
import { until } from '../../bench/lib/scenario.js'
import { createDatabase } from '../../bench/lib/seed.js'
import { startFalStub } from '../fixtures/fal-stub.js'

t.test('fal stub hold mode: IN_PROGRESS until released, then one callback each, paced', async (t) => {
  const fal = await startFalStub()
  t.teardown(() => fal.close())
  const got: Array<{ job: string | null; at: number }> = []
  const receiver = createServer((req, res) => {
    req.resume()
    req.on('end', () => { got.push({ job: new URL(req.url ?? '/', 'http://x').searchParams.get('job'), at: Date.now() }); res.end('{}') })
  })
  await new Promise<void>(resolve => receiver.listen(0, '127.0.0.1', resolve))
  t.teardown(() => receiver.close())
  const port = (receiver.address() as { port: number }).port
  const control = async (what: string, body?: unknown) => {
    const r = await fetch(`${fal.url}/_stub/${what}`, body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    return { status: r.status, body: await r.json() as any }
  }
  await control('defaults', { steps: [], outcome: 'succeeded', media: 'png', finishAfterMs: 20, callback: true })
  t.equal((await control('hold', { on: true })).body.hold, true)
  const submit = async (job: string) => {
    const hook = `http://127.0.0.1:${port}/cb?job=${job}`
    const r = await fetch(`${fal.url}/fal-ai/nano-banana?fal_webhook=${encodeURIComponent(hook)}`, {
      method: 'POST', headers: { authorization: `Key ${fal.key}`, 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'x' }),
    })
    return (await r.json() as { request_id: string; status_url: string })
  }
  const subs = []
  for (let i = 0; i < 10; i++) subs.push(await submit(`job_${i}`))
  // Held past the plan's finishAfterMs: still in progress, no callback.
  await new Promise(resolve => setTimeout(resolve, 100))
  const st = await fetch(subs[0].status_url, { headers: { authorization: `Key ${fal.key}` } })
  t.equal((await st.json() as { status: string }).status, 'IN_PROGRESS')
  t.equal(got.length, 0, 'no callback while held')
  let stats = (await control('stats')).body
  t.equal(stats.held, 10)
  t.equal(stats.counts.submit, 10)
  t.equal(stats.counts.status, 1)
  t.equal(fal.jobs.get(subs[0].request_id)!.ended, null)
  // Released at 100/s: 10 callbacks over ~90 ms, each once, each recorded with our job id.
  t.equal((await control('release', { rate: 100 })).status, 202)
  await fal.waitFor(() => fal.released.length === 10 && fal.released.every(r => r.status === 200), 10_000, 'released callbacks')
  t.equal(got.length, 10)
  t.same(new Set(got.map(g => g.job)), new Set(subs.map((_, i) => `job_${i}`)))
  const sent = fal.released.map(r => r.sentAt)
  t.ok(sent[9] - sent[0] >= 80, `paced: ${Math.round(sent[9] - sent[0])} ms from the first to the last`)
  stats = (await control('stats')).body
  t.equal(stats.held, 0)
  t.equal(stats.callbacks_ok, 10)
  const released = (await control('released')).body as Array<[string, number, number]>
  t.same(released.map(r => r[0]).sort(), subs.map((_, i) => `job_${i}`).sort())
  const st2 = await fetch(subs[0].status_url, { headers: { authorization: `Key ${fal.key}` } })
  t.equal((await st2.json() as { status: string }).status, 'COMPLETED')
  // Hold off: the plan's timer and callback apply again.
  await control('hold', { on: false })
  await submit('job_free')
  await until(() => got.length === 11, 5000, 10)
  t.equal(got[10].job, 'job_free')
  t.equal(fal.released.length, 10, 'not a released job')
})

t.test('provider baseline: charge, submit with a webhook URL, verified callback, download, completion rows', async (t) => {
  const db = await createDatabase(process.env.DATABASE_URL!, 'test_provider_baseline')
  t.teardown(() => db.drop())
  const fal = await startFalStubProcess()
  t.teardown(() => fal.stop())
  await fal.control('defaults', { steps: [], outcome: 'succeeded', media: 'png', finishAfterMs: null, callback: true })
  await fal.control('hold', { on: true })
  const b = await startBaseline('baseline', 'baselines/fastify-provider.js', {
    DATABASE_URL: db.url, ACCOUNTS: '2', CREDITS: '25', WEBHOOK_ACCOUNTS: '1', FAL_URL: fal.url, FAL_KEY: fal.key, FAL_JWKS_URL: fal.jwksUrl,
  })
  t.teardown(() => b.stop())
  const post = (account: string) => fetch(`http://127.0.0.1:${b.port}/v1/generate/image`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-account-id': account }, body: JSON.stringify({ model: 'nano-banana', prompt: 'a test' }),
  })
  const r1 = await post('1')
  t.equal(r1.status, 201)
  const j1 = await r1.json() as { id: string; remaining_credits: number }
  t.equal(j1.remaining_credits, 15)
  t.equal((await post('2')).status, 201)
  t.equal((await post('2')).status, 201)
  t.equal((await post('2')).status, 402, 'the third charge of 10 on 25 credits is refused')
  const stats = await fal.control('stats')
  t.equal(stats.held, 3, 'three jobs submitted to the stub')
  // A forged callback (no signature) is refused and changes nothing.
  const forged = await fetch(`http://127.0.0.1:${b.port}/fal/callback?job=${j1.id}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"status":"OK","payload":{}}' })
  t.equal(forged.status, 401)
  await fal.control('release', { concurrency: 2 })
  t.ok(await until(async () => (await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM bench_jobs WHERE status = 'completed'`)[0].n === 3, 10_000, 20), 'every job completed by its callback')
  const [c] = await db.sql<Record<string, number>[]>`
    SELECT (SELECT count(*)::int FROM bench_accounts a WHERE a.credits <> (SELECT coalesce(sum(delta), 0) FROM bench_credit_entries e WHERE e.account_id = a.id)) AS violations,
      (SELECT count(*)::int FROM bench_credit_entries WHERE kind = 'charge') AS charges,
      (SELECT count(*)::int FROM bench_credit_entries WHERE kind = 'refund') AS refunds,
      (SELECT count(*)::int FROM bench_images) AS library,
      (SELECT count(*)::int FROM bench_webhook_deliveries) AS outbox,
      (SELECT count(*)::int FROM bench_jobs WHERE result_url IS NULL) AS no_result`
  t.same(c, { violations: 0, charges: 3, refunds: 0, library: 3, outbox: 1, no_result: 0 })
  const s = await b.ask<{ callbacks: number; refused: number; failures: number }>({ cmd: 'stats' })
  t.same({ callbacks: s.callbacks, refused: s.refused, failures: s.failures }, { callbacks: 4, refused: 1, failures: 0 })
})
