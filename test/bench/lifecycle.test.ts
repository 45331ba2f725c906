// The job-lifecycle baseline ("the usual way", bench/baselines/fastify-lifecycle.ts) and the
// runner's CPU hog (bench/lib/hog.ts): the baseline really charges, polls with progress
// UPDATEs at the service's cadence, and completes each job with its library row and (only
// for webhook accounts) its outbox row; the hog really burns its core and is gone after stop.
import t from 'tap'
import { startBaseline } from '../../bench/lib/children.js'
import { startHog } from '../../bench/lib/hog.js'
import { until } from '../../bench/lib/scenario.js'
import { createDatabase } from '../../bench/lib/seed.js'

t.test('lifecycle baseline: charge, progress polls, completion rows', async (t) => {
  const db = await createDatabase(process.env.DATABASE_URL!, 'test_lifecycle')
  t.teardown(() => db.drop())
  // SIM_SPEED=100: 150 ms jobs, polled every 20 ms -> up to 7 progress UPDATEs each.
  const b = await startBaseline('baseline', 'baselines/fastify-lifecycle.js', { DATABASE_URL: db.url, ACCOUNTS: '2', CREDITS: '25', SIM_SPEED: '100', WEBHOOK_ACCOUNTS: '1' })
  t.teardown(() => b.stop())
  const post = (account: string) => fetch(`http://127.0.0.1:${b.port}/v1/generate/image`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-account-id': account }, body: JSON.stringify({ model: 'nano-banana', prompt: 'a test' }),
  })
  const r1 = await post('1')
  t.equal(r1.status, 201)
  t.equal((await r1.json()).remaining_credits, 15)
  t.equal((await post('2')).status, 201)
  t.equal((await post('2')).status, 201)
  t.equal((await post('2')).status, 402, 'the third charge of 10 on 25 credits is refused')
  t.equal((await post('x')).status, 400)
  t.ok(await until(async () => (await b.ask<{ pending: number }>({ cmd: 'pending' })).pending === 0, 10_000, 20), 'every job completes')
  const c = await b.ask<Record<string, number>>({ cmd: 'check' })
  t.equal(c.jobs, 3)
  t.equal(c.completed, 3)
  t.equal(c.not_terminal, 0)
  t.equal(c.violations, 0, 'ledger invariant')
  t.equal(c.charges, 3)
  t.equal(c.doubled, 0)
  t.equal(c.library, 3, 'one library row per completed job')
  t.equal(c.outbox, 1, 'an outbox row only for the account with a webhook')
  t.equal(c.outbox_expected, 1)
  t.ok(c.progressUpdates >= 3 && c.progressUpdates <= 21, `1-7 progress UPDATEs per job (${c.progressUpdates} for 3 jobs)`)
  t.equal(c.tickErrors, 0)
})

t.test('CPU hog: busy on its core until stopped', async (t) => {
  const hog = await startHog(0)
  const affinity = (await import('node:child_process')).execFileSync('taskset', ['-p', String(hog.pid)], { encoding: 'utf8' })
  t.match(affinity, /affinity mask: 1\s*$/, 'pinned to core 0')
  await new Promise(resolve => setTimeout(resolve, 500))
  const r = hog.stop()
  t.ok(r.cpuSeconds > 0.01, `it ran (${r.cpuSeconds.toFixed(2)} CPU s in ${r.seconds.toFixed(2)} s)`)
  t.ok(r.share > 0 && r.share <= 1.05, `share of one core ${r.share.toFixed(2)}`)
  t.same(hog.stop(), r, 'stop is idempotent')
  t.ok(await until(() => { try { process.kill(hog.pid, 0); return false } catch { return true } }, 2000, 20), 'the loop is gone')
  await t.rejects(startHog(1024), /has \d+ cores/)
})
