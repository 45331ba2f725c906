// No duplicate paid upstream job, and fal's failure shapes through the real service
// (docs/providers.md "No duplicate upstream jobs", "Failure shapes"): each provider stub creates
// the job and then drops the connection without answering; the service looks for the job
// (fal's request list, Replicate's prediction list, Kie's callback) instead of sending it again:
// exactly one upstream job, one charge, one completion.
import { writeFile, mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { startFalStub } from '../fixtures/fal-stub.js'
import { startKieStub } from '../fixtures/kie-stub.js'
import { startReplicateStub } from '../fixtures/replicate-stub.js'
import type { ProviderStub } from '../fixtures/provider-stub.js'
import { UNLIMITED_TIERS, balance, dbOf, paidUser, pollJob } from '../helpers/jobs.js'
import { startServer } from '../helpers/server.js'
import { freePort } from '../helpers/net.js'

const fal = await startFalStub()
const rep = await startReplicateStub()
const kie = await startKieStub()
t.teardown(async () => { await fal.close(); await rep.close(); await kie.close() })

const dir = await mkdtemp(join(tmpdir(), 'gjt-dup-'))
const routesFile = join(dir, 'providers.json')
await writeFile(routesFile, JSON.stringify({
  // Reconciliation polls 5 s after submission (not at the models' estimates) so lost callbacks are found within a test.
  providers: { fal: { reconcile_after_s: 1 }, replicate: { reconcile_after_s: 1 }, kie: { reconcile_after_s: 1 } },
  routes: {
    'nano-banana': [{ provider: 'fal', model: 'fal-ai/nano-banana', input: { prompt: '$.prompt' } }],
    'grok-image': [{ provider: 'replicate', model: 'xai/grok-imagine-image', input: { prompt: '$.prompt' } }],
    'gpt-image-2': [{ provider: 'kie', model: 'grok-imagine/text-to-image', input: { prompt: '$.prompt' } }],
  },
}))

const port = await freePort()
const s = await startServer(t, {
  PORT: String(port),
  PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
  SHARDS: '1',
  TIER_LIMITS: UNLIMITED_TIERS,
  SUBMIT_TIMEOUT_MS: '1500',
  PROVIDERS_FILE: routesFile,
  FAL_KEY: fal.key,
  FAL_QUEUE_URL: fal.url,
  FAL_JWKS_URL: fal.jwksUrl,
  FAL_API_URL: fal.url,
  REPLICATE_API_TOKEN: rep.token,
  REPLICATE_API_URL: rep.url,
  REPLICATE_WEBHOOK_SECRET: rep.secret,
  KIE_API_KEY: kie.key,
  KIE_API_URL: kie.url,
  KIE_WEBHOOK_HMAC_KEY: kie.hmacKey,
  WEBHOOK_ALLOWLIST: [fal, rep, kie].map(x => new URL(x.url).host).join(','),
})
const sql = dbOf(t, s)
const u = await paidUser(s, 100_000)

async function admin (id: string): Promise<any> {
  const r = await s.req('GET', `/v1/admin/jobs/${id}`, { admin: true })
  if (r.status !== 200) throw new Error(`admin job: ${r.status} ${r.text}`)
  return r.body
}

/** Upstream jobs of `stub` whose input has this prompt, and submissions that carried it. */
function upstreamFor (stub: ProviderStub, prompt: string) {
  return {
    jobs: [...stub.jobs.values()].filter(j => j.input?.prompt === prompt),
    submits: stub.requests.filter(q => q.route === 'submit' && q.body.includes(JSON.stringify(prompt))).length,
  }
}

async function ledgerOf (id: string): Promise<string[]> {
  return (await sql`SELECT kind FROM credit_entries WHERE job_id = ${id} ORDER BY id`).map((e: any) => e.kind)
}

async function breakerOf (model: string): Promise<string> {
  const r = await s.req('GET', '/v1/admin/providers', { admin: true })
  return r.body.providers.find((p: any) => p.model === model).breaker
}

t.test('fal: the queue creates the request and the answer never arrives: found in fal\'s request list, one upstream job, one charge, one completion', async (t) => {
  const prompt = 'fal dropped answer'
  fal.fault({ route: 'submit', drop: true })
  fal.plan({ steps: ['running'], media: 'png', finishAfterMs: 300 })
  const before = await balance(s, u)
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt } })
  t.equal(r.status, 201, r.text)
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 10_000, everyMs: 100 })
  t.equal(job.status, 'completed')
  const up = upstreamFor(fal, prompt)
  t.equal(up.jobs.length, 1, 'exactly one upstream job')
  t.equal(up.submits, 1, 'sent once')
  t.same(await ledgerOf(r.body.id), ['charge'], 'one charge, no refund')
  t.equal(before - await balance(s, u), r.body.credits_charged)
  const a = await admin(r.body.id)
  t.equal(a.upstream.id, up.jobs[0].id, 'the job holds the upstream request that was found')
  t.ok(a.upstream_events.some((e: any) => e.source === 'submit' && e.state === 'unanswered'), 'the lost answer is in the history')
  t.ok(a.upstream_events.some((e: any) => e.source === 'submit' && e.state === 'found' && e.detail.upstream_id === up.jobs[0].id))
  t.ok(fal.requests.some(q => q.route === 'requests' && q.path.includes('endpoint_id=fal-ai%2Fnano-banana')), 'fal\'s request list was read')
})

t.test('Replicate: the prediction is created and the connection drops: found by the job id in its webhook, one prediction, one charge, one completion', async (t) => {
  const prompt = 'replicate dropped answer'
  rep.fault({ route: 'submit', drop: true })
  rep.plan({ steps: ['running'], media: 'png', finishAfterMs: 300 })
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'grok-image', prompt } })
  t.equal(r.status, 201, r.text)
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 10_000, everyMs: 100 })
  t.equal(job.status, 'completed')
  const up = upstreamFor(rep, prompt)
  t.equal(up.jobs.length, 1, 'exactly one prediction')
  t.equal(up.submits, 1)
  t.equal(new URL(up.jobs[0].callbackUrl!).searchParams.get('job'), r.body.id, 'our job id travels in the webhook URL')
  t.same(await ledgerOf(r.body.id), ['charge'])
  t.ok(rep.requests.some(q => q.route === 'list' && q.path.includes('created_after=')), 'the prediction list was read')
})

t.test('Kie: the task is created and the connection drops: no task list, so the job waits for the callback our job id travels in; one task, one charge, one completion', async (t) => {
  const prompt = 'kie dropped answer'
  kie.fault({ route: 'submit', drop: true })
  kie.plan({ steps: [], media: 'png', finishAfterMs: 400 })
  const before = await balance(s, u)
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'gpt-image-2', prompt } })
  t.equal(r.status, 504, r.text)
  t.equal(r.body.code, 'GATEWAY_TIMEOUT')
  const id = r.body.details.job_id
  t.match(r.body.message, /instead of resubmitting/)
  t.notMatch(r.body.message, /kie/i, 'no provider name')
  t.equal(before - await balance(s, u), 10, 'the job was kept and charged')
  const { job } = await pollJob(s, u, id, { timeoutMs: 15_000, everyMs: 100 })
  t.equal(job.status, 'completed')
  const up = upstreamFor(kie, prompt)
  t.equal(up.jobs.length, 1, 'exactly one upstream task')
  t.equal(up.submits, 1, 'never sent again')
  t.equal(new URL(up.jobs[0].callbackUrl!).searchParams.get('job'), id, 'our job id travels in callBackUrl')
  t.same(await ledgerOf(id), ['charge'])
  const a = await admin(id)
  t.equal(a.upstream.id, up.jobs[0].id)
  t.ok(a.upstream_events.some((e: any) => e.source === 'submit' && e.state === 'found' && e.detail.via === 'callback'), 'adopted from the callback after recordInfo confirmed it')
  t.ok(kie.callbacks.some(c => c.status === 200), 'the callback was answered 200')
})

t.test('a submission that times out at creation and then loses its connection is looked up by the job, not resubmitted', async (t) => {
  const prompt = 'fal slow then dropped'
  fal.fault({ route: 'submit', delayMs: 2500, drop: true })
  fal.plan({ steps: ['running'], media: 'png', finishAfterMs: 300 })
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt } })
  t.equal(r.status, 504, r.text)
  const id = r.body.details.job_id
  const { job } = await pollJob(s, u, id, { timeoutMs: 15_000, everyMs: 100 })
  t.equal(job.status, 'completed')
  const up = upstreamFor(fal, prompt)
  t.equal(up.jobs.length, 1, 'exactly one upstream job')
  t.equal(up.submits, 1)
  t.same(await ledgerOf(id), ['charge'])
  const a = await admin(id)
  t.ok(a.upstream_events.some((e: any) => e.state === 'unanswered'))
  t.ok(a.upstream_events.some((e: any) => e.state === 'found' && e.detail.via === 'lookup'))
})

t.test('a 5xx that created nothing: the list is read, nothing found, and the job is answered 502 with nothing charged', async (t) => {
  const prompt = 'fal 503 nothing created'
  fal.fault({ route: 'submit', status: 503 })
  const before = await balance(s, u)
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt } })
  t.equal(r.status, 502, r.text)
  t.equal(await balance(s, u), before, 'nothing charged')
  t.equal(upstreamFor(fal, prompt).jobs.length, 0)
})

t.test('fal accepts input its app later refuses (422 result): failed, refunded, a neutral message, the detail for the operator, the breaker untouched', async (t) => {
  const n = 6
  fal.fault({
    route: 'result', status: 422, times: n,
    body: { detail: [{ loc: ['body', 'image_urls', 0], msg: 'Failed to download the file', type: 'file_download_error', input: 'https://example.invalid/x.png' }] },
  })
  const before = await balance(s, u)
  const ids: string[] = []
  for (let i = 0; i < n; i++) {
    fal.plan({ steps: [], media: 'png', callback: false })
    const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: `late 422 ${i}` } })
    t.equal(r.status, 201, r.text)
    ids.push(r.body.id)
  }
  for (const id of ids) {
    const { job } = await pollJob(s, u, id, { timeoutMs: 15_000, everyMs: 100 })
    t.equal(job.status, 'failed')
    t.equal(job.error_message, 'The provider could not run this job with these inputs; credits refunded')
    t.notMatch(job.error_message, /fal|422|download/i, 'no provider name, no upstream text')
    t.equal(job.credits_refunded, job.credits_charged)
  }
  t.equal(await balance(s, u), before, 'every job refunded')
  const a = await admin(ids[0])
  const failed = a.upstream_events.find((e: any) => e.state === 'failed')
  t.match(failed.detail, { input_refused: true, reason: /Failed to download the file/ }, 'the upstream detail is in the operator view')
  t.equal(await breakerOf('nano-banana'), 'closed', `${n} late input refusals do not open the breaker`)
})
