// A callback refused because fal's signing keys could not be fetched (docs/operations.md
// "Hostile input") is our outage, not a forgery: it is answered 401 (fal retries) but never
// counted against the sender's address, so once the keys load the provider's callbacks are
// taken at once, not answered 429 for the rest of the minute. Forged callbacks still count.
import { writeFile, mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { CALLBACK_REFUSALS_PER_MINUTE } from '../../src/http/routes/providers.js'
import { startFalStub } from '../fixtures/fal-stub.js'
import { UNLIMITED_TIERS, paidUser, pollJob } from '../helpers/jobs.js'
import { freePort } from '../helpers/net.js'
import { startServer } from '../helpers/server.js'

const fal = await startFalStub()
t.teardown(() => fal.close())
fal.defaults = { ...fal.defaults, steps: [], media: 'png', finishAfterMs: null, callback: false }
const dir = await mkdtemp(join(tmpdir(), 'gjt-callback-keys-'))
const file = join(dir, 'providers.json')
await writeFile(file, JSON.stringify({ routes: { 'nano-banana': [{ provider: 'fal', model: 'fal-ai/nano-banana', input: { prompt: '$.prompt' } }] } }))
const port = await freePort()
const s = await startServer(t, {
  PORT: String(port),
  PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
  SHARDS: '1',
  TIER_LIMITS: UNLIMITED_TIERS,
  PROVIDERS_FILE: file,
  ...fal.serviceEnv(),
})
const u = await paidUser(s, 1_000_000)

t.test('keys unavailable: 401 without a refusal counted; the callback after the keys load completes the job', async (t) => {
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'keys' } })
  t.equal(r.status, 201)
  const up = [...fal.jobs.values()].find(j => j.callbackUrl?.includes(r.body.id))!
  t.ok(up, 'submitted to the stub')
  fal.finish(up.id)
  const n = CALLBACK_REFUSALS_PER_MINUTE + 5
  fal.fault({ route: 'jwks', status: 503, times: 1000 })
  const statuses: Array<number | null> = []
  for (let i = 0; i < n; i++) statuses.push((await fal.deliver(up.id)).status)
  t.same([...new Set(statuses)], [401], `${n} callbacks while the JWKS answers 503: each 401, none 429`)
  fal.faults.length = 0
  const ok = await fal.deliver(up.id)
  t.equal(ok.status, 200, 'verified as soon as the keys load (the job completes by it, or by a poll that saw the end first)')
  const { job } = await pollJob(s, u, r.body.id)
  t.equal(job.status, 'completed')
})

t.test('forged callbacks still count: past the limit the address is answered 429', async (t) => {
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'forged' } })
  t.equal(r.status, 201)
  const up = [...fal.jobs.values()].find(j => j.callbackUrl?.includes(r.body.id))!
  fal.finish(up.id)
  const statuses: Array<number | null> = []
  for (let i = 0; i < CALLBACK_REFUSALS_PER_MINUTE + 1; i++) statuses.push((await fal.deliver(up.id, { wrongKey: true })).status)
  t.equal(statuses.filter(x => x === 401).length, CALLBACK_REFUSALS_PER_MINUTE)
  t.equal(statuses[statuses.length - 1], 429)
})
