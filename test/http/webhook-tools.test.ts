// The webhook tools of docs/webhook-tools.md through the real server: a signed webhook.test
// event sent now with the receiver's answer returned, redelivery of a failing delivery,
// secret rotation, the operator's failing deliveries; plus GET /v1/jobs search and the job
// details (request that reproduces it, timeline).
import t from 'tap'
import { sendNow } from '../../src/webhooks/delivery-now.js'
import { startReceiver } from '../fixtures/webhook-receiver.js'
import { createUser, startServer } from '../helpers/server.js'
import { waitFor } from '../helpers/wait.js'

const rx = await startReceiver()
t.teardown(() => rx.close())
const s = await startServer(t, {
  SIM_SPEED: '1000',
  WEBHOOK_ALLOWLIST: `127.0.0.1:${rx.port}`,
  TIER_LIMITS: '{"free":{"rpm":100000,"max_concurrent":1000}}',
})
const sql = s.app.services.sql

/** Waits (on the API's own listing) until `pred` holds for the webhook's deliveries. */
async function deliveriesUntil (key: string, hookId: number, pred: (list: any) => boolean): Promise<any> {
  let list: any
  await waitFor(async () => pred(list = (await s.req('GET', `/v1/webhooks/${hookId}/deliveries`, { key })).body),
    { what: () => `webhook ${hookId}'s deliveries to match (last: ${JSON.stringify(list)})`, timeoutMs: 15_000, everyMs: 25 })
  return list
}

t.test('POST /v1/webhooks/{id}/test sends a signed webhook.test now and answers what the receiver said', async t => {
  const u = await createUser(s)
  const secret = 'test-event-secret-0001'
  rx.route('/tools-ok', secret)
  const hook = await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: rx.url('/tools-ok'), events: ['job.completed'], secret } })
  t.equal(hook.status, 201)
  const r = await s.req('POST', `/v1/webhooks/${hook.body.id}/test`, { key: u.key })
  t.equal(r.status, 200)
  t.equal(r.body.delivered, true)
  t.equal(r.body.status, 'delivered')
  t.equal(r.body.status_code, 200)
  t.equal(r.body.response_excerpt, 'ok', "the receiver's answer body")
  t.ok(Number.isInteger(r.body.latency_ms) && r.body.latency_ms >= 0, 'latency measured')
  t.equal(r.body.attempt, 1)
  const got = rx.verified('/tools-ok')
  t.equal(got.length, 1, 'the receiver verified the signature with the webhook secret')
  t.equal(got[0].event, 'webhook.test')
  t.equal(got[0].deliveryId, r.body.delivery_id)
  t.equal(got[0].json.type, 'webhook.test')
  t.equal(got[0].json.data.webhook.id, hook.body.id)

  const list = (await s.req('GET', `/v1/webhooks/${hook.body.id}/deliveries`, { key: u.key })).body
  t.equal(list.total, 1, 'the test event is listed with the deliveries')
  const d = list.data[0]
  t.equal(d.event, 'webhook.test')
  t.equal(d.job_id, null)
  t.equal(d.status, 'delivered')
  t.same(d.request_body, got[0].json, 'the listing shows the body that was sent')
  t.equal(d.attempts_history.length, 1)
  t.equal(d.attempts_history[0].manual, true)
  t.equal(d.attempts_history[0].response_excerpt, 'ok')
})

t.test('a failing receiver: the test event fails with its answer, and a redelivery after the fix delivers it', async t => {
  const u = await createUser(s)
  const secret = 'test-event-secret-0002'
  rx.route('/tools-500', secret, [500])
  const hook = (await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: rx.url('/tools-500'), events: ['job.completed'], secret } })).body
  const r = await s.req('POST', `/v1/webhooks/${hook.id}/test`, { key: u.key })
  t.equal(r.status, 200)
  t.equal(r.body.delivered, false)
  t.equal(r.body.status, 'failed', 'a test event is never retried automatically')
  t.equal(r.body.status_code, 500)
  t.equal(r.body.response_excerpt, 'receiver says 500')
  t.match(r.body.error, /^HTTP 500: receiver says 500$/)
  const again = await s.req('POST', `/v1/webhooks/${hook.id}/deliveries/${r.body.delivery_id}/redeliver`, { key: u.key })
  t.equal(again.status, 200)
  t.equal(again.body.delivered, true)
  t.equal(again.body.status, 'delivered')
  t.equal(again.body.attempt, 2)
  const got = rx.verified('/tools-500')
  t.equal(got.length, 2)
  t.equal(got[1].deliveryId, got[0].deliveryId, 'the same X-Service-Delivery')
  t.equal(got[1].body, got[0].body, 'the same bytes')
  const d = (await s.req('GET', `/v1/webhooks/${hook.id}/deliveries`, { key: u.key })).body.data[0]
  t.equal(d.status, 'delivered')
  t.same(d.attempts_history.map((a: any) => a.status_code), [500, 200])
})

t.test("a job's delivery retrying after a 500 is redelivered at once; a delivery the pool holds is 409", async t => {
  const u = await createUser(s, { credits: 1000 })
  const secret = 'job-event-secret-00003'
  rx.route('/tools-job', secret, [500])
  const hook = (await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: rx.url('/tools-job'), events: ['job.completed'], secret } })).body
  const job = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a red kite' } })
  t.equal(job.status, 201)
  const list = await deliveriesUntil(u.key, hook.id, l => l.data[0]?.attempts === 1 && l.data[0]?.status === 'pending')
  const d = list.data[0]
  t.equal(d.job_id, job.body.id)
  t.equal(d.last_status_code, 500)
  t.equal(d.attempts_history[0].manual, false)
  t.equal(d.attempts_history[0].response_excerpt, 'receiver says 500', 'the excerpt of an automatic attempt')
  t.ok(Date.parse(d.next_attempt_at) > Date.now(), 'the next automatic attempt is in the future (5 s)')

  // The pool holds it (an attempt in flight): a manual send would race it.
  await sql`UPDATE webhook_deliveries SET claimed_until = now() + interval '30 seconds' WHERE id = ${d.id}`
  const busy = await s.req('POST', `/v1/webhooks/${hook.id}/deliveries/${d.id}/redeliver`, { key: u.key })
  t.equal(busy.status, 409)
  t.equal(busy.body.code, 'CONFLICT')
  t.equal(busy.headers.get('retry-after'), '5')
  await sql`UPDATE webhook_deliveries SET claimed_until = NULL WHERE id = ${d.id}`

  const r = await s.req('POST', `/v1/webhooks/${hook.id}/deliveries/${d.id}/redeliver`, { key: u.key })
  t.equal(r.status, 200)
  t.equal(r.body.delivered, true)
  t.equal(r.body.attempt, 2)
  t.equal(r.body.next_attempt_at, null)
  const got = rx.verified('/tools-job')
  t.equal(got.length, 2)
  t.equal(got[1].json.data.job.id, job.body.id)
  const after = (await s.req('GET', `/v1/webhooks/${hook.id}/deliveries`, { key: u.key })).body.data[0]
  t.equal(after.status, 'delivered')
  t.same(after.attempts_history.map((a: any) => [a.attempt, a.status_code, a.manual]), [[1, 500, false], [2, 200, true]])
  const [row] = await sql<{ claimed_until: Date | null }[]>`SELECT claimed_until FROM webhook_deliveries WHERE id = ${d.id}`
  t.equal(row.claimed_until, null, 'the manual claim is released')

  // The operator sees nothing failing for this webhook any more, and the job page's timeline lists the delivery.
  const details = await s.req('GET', `/v1/jobs/${job.body.id}/details`, { key: u.key })
  t.ok(details.body.timeline.some((e: any) => e.kind === 'webhook' && /job\.completed delivered .*2 attempts, last answer 200/.test(e.message)), 'the timeline shows the delivery')
})

t.test('rotate-secret: the new secret is answered once (no-store), signs the next sends and the pending retries', async t => {
  const u = await createUser(s, { credits: 1000 })
  rx.route('/tools-rotate', 'old-secret-0123456789', ['hang'])
  const hook = (await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: rx.url('/tools-rotate'), events: ['job.completed'], secret: 'old-secret-0123456789' } })).body
  const job = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a blue kite' } })
  t.equal(job.status, 201)
  await rx.waitFor('/tools-rotate', 1)
  const r = await s.req('POST', `/v1/webhooks/${hook.id}/rotate-secret`, { key: u.key })
  t.equal(r.status, 200)
  t.match(r.body.secret, /^[0-9a-f]{64}$/)
  t.equal(r.body.id, hook.id)
  t.equal(r.headers.get('cache-control'), 'no-store')
  const [pending] = await sql<{ secret: string; status: string }[]>`SELECT secret, status FROM webhook_deliveries WHERE webhook_id = ${hook.id}`
  t.equal(pending.status, 'pending')
  t.equal(pending.secret, r.body.secret, 'the pending delivery will be signed with the new secret')
  const listed = (await s.req('GET', '/v1/webhooks', { key: u.key })).body.data.find((h: any) => h.id === hook.id)
  t.notOk('secret' in listed, 'never shown again')

  rx.route('/tools-rotate', r.body.secret)
  const test = await s.req('POST', `/v1/webhooks/${hook.id}/test`, { key: u.key })
  t.equal(test.body.delivered, true, 'the receiver verifies the new secret')
  const chosen = await s.req('POST', `/v1/webhooks/${hook.id}/rotate-secret`, { key: u.key, body: { secret: 'my-own-secret-0123456789' } })
  t.equal(chosen.body.secret, 'my-own-secret-0123456789')
  const short = await s.req('POST', `/v1/webhooks/${hook.id}/rotate-secret`, { key: u.key, body: { secret: 'short' } })
  t.equal(short.status, 400)
  t.equal(short.body.code, 'VALIDATION_ERROR')
  const extra = await s.req('POST', `/v1/webhooks/${hook.id}/rotate-secret`, { key: u.key, body: { secrets: 'x' } })
  t.equal(extra.status, 400)
})

t.test('a URL password is masked, sent as Basic auth, and the SSRF rules hold for manual sends', async t => {
  const u = await createUser(s)
  rx.route('/tools-basic', 'basic-secret-0123456789')
  const hook = await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: `http://alice:s3cr3t-pw@127.0.0.1:${rx.port}/tools-basic`, events: ['job.completed'], secret: 'basic-secret-0123456789' } })
  t.equal(hook.body.url, `http://alice:****@127.0.0.1:${rx.port}/tools-basic`)
  t.notMatch(hook.text, /s3cr3t-pw/)
  const r = await s.req('POST', `/v1/webhooks/${hook.body.id}/test`, { key: u.key })
  t.equal(r.body.delivered, true)
  t.notMatch(r.text, /s3cr3t-pw/)
  const got = rx.verified('/tools-basic')
  t.equal(got[0].headers.authorization, `Basic ${Buffer.from('alice:s3cr3t-pw').toString('base64')}`)
  t.equal(got[0].json.data.webhook.url, `http://alice:****@127.0.0.1:${rx.port}/tools-basic`, 'masked in the test body too')
  const list = await s.req('GET', `/v1/webhooks/${hook.body.id}/deliveries`, { key: u.key })
  t.notMatch(list.text, /s3cr3t-pw/)

  // A stored URL the rules refuse now (not allowlisted, private): refused before any request.
  const before = rx.received.length
  await sql`UPDATE webhooks SET url = ${`http://127.0.0.1:${rx.port + 1}/x`} WHERE id = ${hook.body.id}`
  const refused = await s.req('POST', `/v1/webhooks/${hook.body.id}/test`, { key: u.key })
  t.equal(refused.status, 200)
  t.equal(refused.body.delivered, false)
  t.equal(refused.body.status_code, null)
  t.match(refused.body.error, /refused: webhook URLs must use https/)
  t.equal(rx.received.length, before, 'nothing was sent')
  // A public-looking name that resolves to a private address is refused at connect time.
  const rebound = await sendNow({ id: 'dlv_x', event: 'webhook.test', url: 'https://hooks.example.com/x', secret: 's', body: '{}' }, {
    allowlist: [], userAgent: 'test', lookupAll: async () => [{ address: '10.1.2.3', family: 4 }],
  })
  t.equal(rebound.statusCode, null)
  t.match(rebound.error, /refused: hooks\.example\.com resolves to 10\.1\.2\.3, a private address/)
})

t.test('errors: unknown, foreign or malformed ids', async t => {
  const a = await createUser(s)
  const b = await createUser(s)
  rx.route('/tools-err', 'err-secret-0123456789')
  const hook = (await s.req('POST', '/v1/webhooks', { key: a.key, body: { url: rx.url('/tools-err'), events: ['job.failed'], secret: 'err-secret-0123456789' } })).body
  for (const [path, code, status] of [
    [`/v1/webhooks/${hook.id}/test`, 'WEBHOOK_NOT_FOUND', 404],
    [`/v1/webhooks/${hook.id}/rotate-secret`, 'WEBHOOK_NOT_FOUND', 404],
    [`/v1/webhooks/${hook.id}/deliveries/dlv_nope/redeliver`, 'WEBHOOK_NOT_FOUND', 404],
  ] as const) {
    const r = await s.req('POST', path, { key: b.key })
    t.equal(r.status, status, `${path} of another account`)
    t.equal(r.body.code, code)
  }
  const bad = await s.req('POST', '/v1/webhooks/abc/test', { key: a.key })
  t.equal(bad.status, 400)
  t.equal(bad.body.code, 'INVALID_PARAM')
  const missing = await s.req('POST', `/v1/webhooks/${hook.id}/deliveries/dlv_nope/redeliver`, { key: a.key })
  t.equal(missing.status, 404)
  t.equal(missing.body.code, 'NOT_FOUND')
  t.equal(missing.body.param, 'deliveryId')
  const weird = await s.req('POST', `/v1/webhooks/${hook.id}/deliveries/${encodeURIComponent("x' OR 1=1")}/redeliver`, { key: a.key })
  t.equal(weird.status, 404)
  const anon = await s.req('POST', `/v1/webhooks/${hook.id}/test`)
  t.equal(anon.status, 401)
})

t.test('GET /v1/admin/deliveries lists failing deliveries for the operator only', async t => {
  const u = await createUser(s, { credits: 1000 })
  rx.route('/tools-failing', 'failing-secret-0123456789', [503])
  const hook = (await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: `http://op:pw-hidden@127.0.0.1:${rx.port}/tools-failing`, events: ['job.completed'], secret: 'failing-secret-0123456789' } })).body
  const job = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a green kite' } })
  await deliveriesUntil(u.key, hook.id, l => l.data[0]?.attempts === 1)
  const r = await s.req('GET', '/v1/admin/deliveries?status=retrying', { admin: true })
  t.equal(r.status, 200)
  const row = r.body.data.find((d: any) => d.job_id === job.body.id)
  t.ok(row, 'the retrying delivery is listed')
  t.equal(row.account_id, u.id)
  t.equal(row.webhook_id, hook.id)
  t.equal(row.last_status_code, 503)
  t.equal(row.url, `http://op:****@127.0.0.1:${rx.port}/tools-failing`)
  t.notMatch(r.text, /pw-hidden/)
  const failedOnly = await s.req('GET', '/v1/admin/deliveries?status=failed', { admin: true })
  t.notOk(failedOnly.body.data.some((d: any) => d.job_id === job.body.id), 'not listed as failed for good')
  t.equal((await s.req('GET', '/v1/admin/deliveries', { key: u.key })).status, 401)
  const badStatus = await s.req('GET', '/v1/admin/deliveries?status=nope', { admin: true })
  t.equal(badStatus.status, 400)
  t.equal(badStatus.body.code, 'VALIDATION_ERROR')
})

t.test('GET /v1/jobs: q searches prompts (and ids) beside the status, model and type filters', async t => {
  const u = await createUser(s, { credits: 1000 })
  const make = (prompt: string) => s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt } })
  const a = await make('A Lighthouse at dusk')
  await make('a harbour at dawn')
  await make('100% pure [sim:fail] lighthouse_test')
  const hits = await s.req('GET', '/v1/jobs?q=lighthouse', { key: u.key })
  t.equal(hits.status, 200)
  t.equal(hits.body.total, 2, 'case-insensitive part of the prompt')
  const pct = await s.req('GET', `/v1/jobs?q=${encodeURIComponent('100%')}`, { key: u.key })
  t.equal(pct.body.total, 1, '% is a literal, not a wildcard')
  const under = await s.req('GET', '/v1/jobs?q=e_t', { key: u.key })
  t.equal(under.body.total, 1, '_ is a literal')
  const byId = await s.req('GET', `/v1/jobs?q=${a.body.id}`, { key: u.key })
  t.same(byId.body.data.map((j: any) => j.id), [a.body.id])
  const combined = await s.req('GET', '/v1/jobs?q=lighthouse&type=video', { key: u.key })
  t.equal(combined.body.total, 0)
  const tooLong = await s.req('GET', `/v1/jobs?q=${'x'.repeat(201)}`, { key: u.key })
  t.equal(tooLong.status, 400)
  t.equal(tooLong.body.code, 'VALIDATION_ERROR')
  const other = await createUser(s)
  t.equal((await s.req('GET', '/v1/jobs?q=lighthouse', { key: other.key })).body.total, 0, "never another account's jobs")
})

t.test('GET /v1/jobs/{id}/details: the request that reproduces the job, and its timeline', async t => {
  const u = await createUser(s, { credits: 2000 })
  // Past the free trial's one video: the reproduced video request is a second one.
  t.equal((await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 600 } })).status, 201)
  const requests: Array<[string, Record<string, unknown>]> = [
    ['/v1/generate/image', { model: 'nano-banana', prompt: 'a paper crane', webhook_url: rx.url('/nowhere'), webhook_secret: 'per-job-secret-0123456789' }],
    ['/v1/generate/video', { model: 'veo3-fast', prompt: 'a paper boat', image_url: 'https://example.com/first-frame.png' }],
    ['/v1/generate/audio', { model: 'music', style: 'calm piano', instrumental: true }],
  ]
  for (const [path, body] of requests) {
    const made = await s.req('POST', path, { key: u.key, body })
    t.equal(made.status, 201, `${path} created`)
    const d = await s.req('GET', `/v1/jobs/${made.body.id}/details`, { key: u.key })
    t.equal(d.status, 200)
    t.equal(d.body.job.id, made.body.id)
    t.equal(d.body.request.method, 'POST')
    t.equal(d.body.request.path, path)
    t.notMatch(d.text, /per-job-secret/, 'the webhook secret is never shown')
    for (const [k, v] of Object.entries(body)) if (k !== 'webhook_secret') t.same(d.body.request.body[k], v, `${k} kept`)
    t.notOk('credits' in d.body.request.body || 'estimated_seconds' in d.body.request.body || 'kind' in d.body.request.body, 'no internal field')
    // The reproduced request is accepted as it is.
    const again = await s.req('POST', d.body.request.path, { key: u.key, body: d.body.request.body })
    t.equal(again.status, 201, `the reproduced ${path} request creates a job (${again.text.slice(0, 200)})`)
    t.equal(again.body.credits_charged, made.body.credits_charged, 'at the same price')
    t.same(d.body.timeline.slice(0, 2).map((e: any) => e.kind), ['created', 'charged'])
    t.equal(d.body.timeline[1].credits, -made.body.credits_charged)
  }
  const failed = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a storm [sim:fail]' } })
  let d: any
  await waitFor(async () => (d = (await s.req('GET', `/v1/jobs/${failed.body.id}/details`, { key: u.key })).body).timeline.some((e: any) => e.kind === 'refunded'),
    { what: () => `the failed job's refund in its timeline (last: ${JSON.stringify(d)})`, everyMs: 25 })
  const kinds = d.timeline.map((e: any) => e.kind)
  t.ok(kinds.includes('failed') && kinds.includes('refunded'), `failed and refunded (${kinds.join(', ')})`)
  t.equal(d.timeline.find((e: any) => e.kind === 'refunded').credits, 10)
  const other = await createUser(s)
  const foreign = await s.req('GET', `/v1/jobs/${failed.body.id}/details`, { key: other.key })
  t.equal(foreign.status, 404)
  t.equal(foreign.body.code, 'JOB_NOT_FOUND')
})
