// Job creation, docs/api.md "Jobs" (free trial included) and "Errors": POST /v1/generate/{video,image,audio}.
import t from 'tap'
import { assertError } from '../helpers/assert.js'
import { createUser, startServer, type TestUser } from '../helpers/server.js'
import { balance, dbOf, FAST_ENV, fetchResult, image, ledger, paidUser, pollJob, video } from '../helpers/jobs.js'

const [s, limited] = await Promise.all([
  startServer(t, { ...FAST_ENV, MODERATION_TERMS: 'zorblax quux, Plumbus', WEBHOOK_ALLOWLIST: '127.0.0.1:9' }),
  // Small concurrency caps: free keys 1 job in flight, pro keys 2.
  // SIM_SPEED 20: its [sim:queue] jobs hold their slots for 30 s before their deadline.
  startServer(t, { ...FAST_ENV, SIM_SPEED: '20', TIER_LIMITS: JSON.stringify({ free: { rpm: 100000, max_concurrent: 1 }, pro: { rpm: 100000, max_concurrent: 2 } }) }),
])
const sql = dbOf(t, s)

const JOB_ID = /^job_[A-Za-z0-9_-]{16}$/
const gen = (u: TestUser, kind: string, body: unknown, headers?: Record<string, string>) =>
  s.req('POST', `/v1/generate/${kind}`, { key: u.key, body, headers })

async function jobCount (u: TestUser): Promise<number> {
  const [r] = await sql`SELECT count(*)::int AS n FROM jobs WHERE account_id = ${u.id}`
  return r.n
}

t.test('video: 201 CreatedJob with a job_ id, the catalogue price charged and remaining_credits = balance - price', async (t) => {
  const u = await paidUser(s, 1000)
  const r = await gen(u, 'video', video())
  t.equal(r.status, 201, r.text)
  const c = r.body
  t.match(c.id, JOB_ID, 'id is job_ + 16 base64url characters')
  t.equal(c.status, 'submitted', 'accepted by the provider at once')
  t.equal(c.model, 'veo3-fast')
  t.equal(c.credits_charged, 120, 'veo3-fast costs 120')
  t.equal(c.remaining_credits, 880, 'remaining = 1000 - 120')
  t.equal(c.estimated_seconds, 110, 'catalogue estimate')
  t.notOk('replayed' in c, 'replayed only on replays')
  t.equal(await balance(s, u), 880, 'GET /v1/credits agrees')

  const r2 = await gen(u, 'video', { model: 'seedance-2-mini', prompt: 'waves', resolution: '720p', duration: '10' })
  t.equal(r2.status, 201, r2.text)
  t.equal(r2.body.credits_charged, 150, 'seedance-2-mini 720p 10s costs 150')
  t.equal(r2.body.remaining_credits, 730)

  const entries = await ledger(sql, u.id)
  const charges = entries.filter(e => e.kind === 'charge')
  t.same(charges.map(e => [e.delta, e.job_id]), [[-120, c.id], [-150, r2.body.id]], 'one charge entry per job, linked to it')
})

t.test('image: 201 charged at the catalogue price (flat and by resolution)', async (t) => {
  const u = await paidUser(s, 500)
  const a = await gen(u, 'image', image())
  t.equal(a.status, 201, a.text)
  t.match(a.body.id, JOB_ID)
  t.equal(a.body.model, 'nano-banana')
  t.equal(a.body.credits_charged, 10)
  t.equal(a.body.remaining_credits, 490)
  t.equal(a.body.estimated_seconds, 15)
  const b = await gen(u, 'image', { model: 'gpt-image-2', prompt: 'a lighthouse', resolution: '4K', output_format: 'jpeg' })
  t.equal(b.status, 201, b.text)
  t.equal(b.body.credits_charged, 30, 'gpt-image-2 4K costs 30')
  t.equal(b.body.remaining_credits, 460)
  const { job } = await pollJob(s, u, b.body.id)
  t.equal(job.status, 'completed')
  t.equal(job.type, 'image')
  const f = await fetchResult(s, job.result_url)
  t.equal(f.status, 200)
  t.equal(f.headers.get('content-type'), 'image/jpeg', 'output_format jpeg gives a JPEG')
  const bytes = Buffer.from(await f.arrayBuffer())
  t.same([...bytes.subarray(0, 3)], [0xff, 0xd8, 0xff], 'JPEG magic bytes')
})

t.test('audio voiceover completes synchronously: 201 status completed with result_url', async (t) => {
  const u = await paidUser(s, 500)
  const text = 'Hello there, this is a short line.' // 34 chars -> 3 s -> 20 credits
  const r = await gen(u, 'audio', { model: 'voiceover', text, voice_id: 'alloy' })
  t.equal(r.status, 201, r.text)
  t.equal(r.body.status, 'completed')
  t.equal(r.body.model, 'voiceover')
  t.equal(r.body.credits_charged, 20)
  t.equal(r.body.remaining_credits, 480)
  t.type(r.body.result_url, 'string', 'result_url in the 201')
  const g = await s.req('GET', `/v1/jobs/${r.body.id}`, { key: u.key })
  t.equal(g.body.status, 'completed')
  t.equal(g.body.type, 'audio')
  t.equal(g.body.progress, 100)
  t.equal(g.body.result_url, r.body.result_url)
  t.type(g.body.completed_at, 'string')
  const f = await fetchResult(s, r.body.result_url)
  t.equal(f.status, 200)
  t.equal(f.headers.get('content-type'), 'audio/mpeg')
  t.ok((await f.arrayBuffer()).byteLength > 0)

  const long = await gen(u, 'audio', { model: 'voiceover', text: 'x'.repeat(451), voice_id: 'alloy' })
  t.equal(long.body.credits_charged, 80, '451 chars -> 31 s -> 80 credits')
})

t.test('audio music is asynchronous: 201 submitted without result, completes later', async (t) => {
  const u = await paidUser(s, 500)
  const r = await gen(u, 'audio', { model: 'music', title: 'Song', style: 'lofi beats', instrumental: true })
  t.equal(r.status, 201, r.text)
  t.equal(r.body.status, 'submitted')
  t.equal(r.body.credits_charged, 50)
  t.equal(r.body.remaining_credits, 450)
  t.notOk(r.body.result_url, 'no result yet')
  const { job } = await pollJob(s, u, r.body.id)
  t.equal(job.status, 'completed')
  t.match(job.result_url, /\.mp3$/)
})

t.test('402 INSUFFICIENT_CREDITS when the balance does not cover the price; nothing charged, no job', async (t) => {
  const u = await paidUser(s, 15)
  const a = await gen(u, 'image', { model: 'nano-banana-pro', prompt: 'x' }) // 30
  assertError(t, a, 402, 'INSUFFICIENT_CREDITS')
  t.equal(await balance(s, u), 15, 'balance unchanged')
  t.equal(await jobCount(u), 0, 'no job row')
  const b = await gen(u, 'image', image()) // 10 fits
  t.equal(b.status, 201)
  t.equal(b.body.remaining_credits, 5)
  const c = await gen(u, 'image', image())
  assertError(t, c, 402, 'INSUFFICIENT_CREDITS', 'second 10-credit image with 5 left')
  t.equal(await balance(s, u), 5)
  const kinds = (await ledger(sql, u.id)).map(e => e.kind)
  t.same(kinds, ['grant', 'purchase', 'charge'], 'only the one successful charge in the ledger')
})

t.test('free trial: one video until the first purchase; the next is 403 upgrade_required with pricing_url, nothing charged', async (t) => {
  const u = await createUser(s, { credits: 200 })
  const first = await gen(u, 'video', video())
  t.equal(first.status, 201, first.text)
  t.equal(first.body.remaining_credits, 80)
  const second = await gen(u, 'video', { model: 'seedance-2-mini', prompt: 'cheap', resolution: '480p', duration: '6' })
  assertError(t, second, 403, 'upgrade_required')
  t.type(second.body.pricing_url, 'string', 'pricing_url links to plans')
  t.equal(await balance(s, u), 80, 'nothing charged')
  t.equal(await jobCount(u), 1)

  const img = await gen(u, 'image', image())
  t.equal(img.status, 201, 'images are allowed on the free trial...')
  t.equal(img.body.credits_charged, 10, '...and charged at the catalogue price (never free)')
  t.equal(await balance(s, u), 70)

  const cr = await s.req('GET', '/v1/credits', { key: u.key })
  t.same(cr.body, { credits: 70, tier: 'free', has_purchased: false, free_trial: { credits_granted: 200, video_used: true } })

  const p = await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 600, currency: 'usd', amount: 5 } })
  t.equal(p.status, 201)
  const third = await gen(u, 'video', { model: 'seedance-2-mini', prompt: 'cheap', resolution: '480p', duration: '6' })
  t.equal(third.status, 201, 'after a purchase more videos work')
  t.equal(third.body.credits_charged, 50)
  t.equal(third.body.remaining_credits, 620)
  const fourth = await gen(u, 'video', video())
  t.equal(fourth.status, 201)
})

t.test('free trial under concurrency: of 8 simultaneous videos exactly one is created', async (t) => {
  const u = await createUser(s, { credits: 200 })
  const rs = await Promise.all(Array.from({ length: 8 }, () => gen(u, 'video', { model: 'seedance-2-mini', prompt: 'p', resolution: '480p', duration: '6' })))
  t.equal(rs.filter(r => r.status === 201).length, 1, 'one 201')
  t.equal(rs.filter(r => r.status === 403 && r.body.code === 'upgrade_required').length, 7, 'seven upgrade_required')
  t.equal(await balance(s, u), 150)
})

t.test('a trial video the provider fails is refunded and gives the free video back', async (t) => {
  const u = await createUser(s, { credits: 200 })
  const r = await gen(u, 'video', video('doomed [sim:fail]'))
  t.equal(r.status, 201)
  const { job } = await pollJob(s, u, r.body.id)
  t.equal(job.status, 'failed')
  t.equal(job.credits_refunded, 120)
  const cr = await s.req('GET', '/v1/credits', { key: u.key })
  t.equal(cr.body.credits, 200, 'refunded')
  t.equal(cr.body.free_trial.video_used, false, 'the failed video does not use up the trial')
  const again = await gen(u, 'video', video())
  t.equal(again.status, 201, 'another trial video is allowed')
  const more = await gen(u, 'video', video())
  assertError(t, more, 403, 'upgrade_required', 'but only one')
})

t.test('concurrency: POST /batch from a key already at its cap is refused whole (429 concurrency_limit_reached, Retry-After); a cap reached partway answers per item', async (t) => {
  const s2 = limited
  const u = await paidUser(s2, 1000)
  const q1 = await s2.req('POST', '/v1/generate/image', { key: u.key, body: image('hold [sim:queue]') })
  t.equal(q1.status, 201)
  // One slot left: the first item takes it, the second is refused on its own.
  const partway = await s2.req('POST', '/v1/batch', { key: u.key, body: { jobs: [{ type: 'image', ...image('one [sim:queue]') }, { type: 'image', ...image('two') }] } })
  t.equal(partway.status, 200)
  t.same(partway.body.results.map((r: any) => r.status), [201, 429])
  t.equal(partway.body.results[1].error.code, 'concurrency_limit_reached')
  t.equal(partway.body.credits_charged, 10)
  // Now at the cap before the batch begins: the request is a 429, like /generate/*.
  const whole = await s2.req('POST', '/v1/batch', { key: u.key, body: { jobs: [{ type: 'image', ...image('three') }] }, headers: { 'idempotency-key': 'batch-at-cap' } })
  assertError(t, whole, 429, 'concurrency_limit_reached')
  t.ok(Number(whole.headers.get('retry-after')) > 0, 'Retry-After')
  t.ok(whole.headers.get('x-ratelimit-limit') !== null, 'X-RateLimit-* as on every answer')
  const cr = await s2.req('GET', '/v1/credits', { key: u.key })
  t.equal(cr.body.credits, 980, 'nothing charged for the refused batch')
  // The refusal is not remembered under its Idempotency-Key: the retry, once a slot is free, runs.
  t.equal((await s2.req('DELETE', `/v1/jobs/${q1.body.id}`, { key: u.key })).status, 200)
  const retry = await s2.req('POST', '/v1/batch', { key: u.key, body: { jobs: [{ type: 'image', ...image('three') }] }, headers: { 'idempotency-key': 'batch-at-cap' } })
  t.equal(retry.status, 200)
  t.equal(retry.body.results[0].status, 201, 'the retry created its job')
  for (const r of [...partway.body.results, ...retry.body.results]) if (r.job) await s2.req('DELETE', `/v1/jobs/${r.job.id}`, { key: u.key })
})

t.test('concurrency: the key with max_concurrent jobs in flight gets 429 concurrency_limit_reached, nothing charged', async (t) => {
  const s2 = limited
  const u = await paidUser(s2, 1000)
  const q1 = await s2.req('POST', '/v1/generate/image', { key: u.key, body: image('hold [sim:queue]') })
  const q2 = await s2.req('POST', '/v1/generate/image', { key: u.key, body: image('hold [sim:queue]') })
  t.equal(q1.status, 201)
  t.equal(q1.body.status, 'queued')
  t.equal(q2.status, 201)
  const over = await s2.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  assertError(t, over, 429, 'concurrency_limit_reached')
  const cr = await s2.req('GET', '/v1/credits', { key: u.key })
  t.equal(cr.body.credits, 980, 'the refused job charged nothing')

  // Per key: another key of the same account has its own count.
  const k2 = await s2.req('POST', '/v1/auth/keys', { jwt: u.jwt, body: { name: 'second' } })
  const other = await s2.req('POST', '/v1/generate/image', { key: k2.body.key, body: image() })
  t.equal(other.status, 201, 'a second key is not limited by the first key\'s jobs')

  const del = await s2.req('DELETE', `/v1/jobs/${q1.body.id}`, { key: u.key })
  t.equal(del.status, 200)
  const after = await s2.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  t.equal(after.status, 201, 'a finished job frees its slot')
  await s2.req('DELETE', `/v1/jobs/${q2.body.id}`, { key: u.key })
})

t.test('content screen: a flagged prompt is 403 CONTENT_POLICY_VIOLATION, nothing charged; POLICY_VIOLATION_LIMIT hits ban the account', async (t) => {
  const u = await paidUser(s, 1000)
  const a = await gen(u, 'video', video('a scene with forbidden-test-term inside'))
  assertError(t, a, 403, 'CONTENT_POLICY_VIOLATION', 'built-in term')
  const b = await gen(u, 'image', image('a Zorblax-Quux portrait'))
  assertError(t, b, 403, 'CONTENT_POLICY_VIOLATION', 'MODERATION_TERMS term, any case and separators')
  t.equal(await balance(s, u), 1000, 'nothing charged')
  t.equal(await jobCount(u), 0, 'no job rows')
  const ok = await gen(u, 'image', image('a plumbusy afternoon'))
  t.equal(ok.status, 201, 'terms match whole words only')

  const c = await gen(u, 'audio', { model: 'voiceover', text: 'say plumbus now', voice_id: 'v' })
  assertError(t, c, 403, 'CONTENT_POLICY_VIOLATION', 'audio text is screened; third violation')
  const banned = await gen(u, 'image', image())
  assertError(t, banned, 403, 'ACCOUNT_BANNED', 'after 3 violations the account is suspended')
  const read = await s.req('GET', '/v1/credits', { key: u.key })
  assertError(t, read, 403, 'ACCOUNT_BANNED', 'for every route')
  const [row] = await sql`SELECT banned, policy_violations FROM accounts WHERE id = ${u.id}`
  t.same({ ...row }, { banned: true, policy_violations: 3 })
})

t.test('[sim:reject]: the provider refuses the submission: 502 PROVIDER_ERROR, nothing charged, no job', async (t) => {
  const u = await paidUser(s, 1000)
  const r = await gen(u, 'video', video('nope [sim:reject]'))
  assertError(t, r, 502, 'PROVIDER_ERROR')
  t.equal(await balance(s, u), 1000)
  t.equal(await jobCount(u), 0)
  const ok = await gen(u, 'video', video())
  t.equal(ok.status, 201, 'the next submission goes through')
})

t.test('[sim:timeout]: 504 GATEWAY_TIMEOUT with details.job_id; the job is charged, then fails with a refund at its deadline', async (t) => {
  const u = await paidUser(s, 1000)
  const started = Date.now()
  const r = await gen(u, 'image', image('slow [sim:timeout]'))
  assertError(t, r, 504, 'GATEWAY_TIMEOUT')
  t.ok(Date.now() - started >= 300, 'after SUBMIT_TIMEOUT_MS')
  const id = r.body.details?.job_id
  t.match(id, JOB_ID, 'details.job_id names the job')
  t.equal(await balance(s, u), 990, 'charged: the job may still run')
  const g = await s.req('GET', `/v1/jobs/${id}`, { key: u.key })
  t.equal(g.status, 200)
  t.ok(['queued', 'submitted'].includes(g.body.status), `still in flight (${g.body.status})`)
  // deadline = max(4 x 15 s, 600 s) / SIM_SPEED 200 = 3 s
  const { job } = await pollJob(s, u, id, { timeoutMs: 10_000, everyMs: 100 })
  t.equal(job.status, 'failed')
  t.equal(job.credits_refunded, 10)
  t.type(job.error_message, 'string')
  t.ok(Date.parse(job.completed_at) - Date.parse(job.created_at) >= 2900, 'not before the deadline')
  t.equal(await balance(s, u), 1000, 'refunded')
})

t.test('validation errors: 400 VALIDATION_ERROR and 422 UNSUPPORTED_OPTION with param; nothing charged', async (t) => {
  const u = await paidUser(s, 1000)
  const cases: Array<[string, string, unknown, number, string, string?]> = [
    ['no model', 'video', { prompt: 'x' }, 400, 'VALIDATION_ERROR'],
    ['unknown model', 'image', { model: 'no-such-model', prompt: 'x' }, 422, 'UNSUPPORTED_OPTION', 'model'],
    ['empty prompt', 'image', { model: 'nano-banana', prompt: '' }, 400, 'VALIDATION_ERROR'],
    ['bad aspect ratio', 'video', { model: 'veo3-fast', prompt: 'x', aspect_ratio: '5:4' }, 400, 'VALIDATION_ERROR'],
    ['text too long', 'audio', { model: 'voiceover', text: 'x'.repeat(5001), voice_id: 'v' }, 400, 'VALIDATION_ERROR'],
    ['voiceover without voice_id', 'audio', { model: 'voiceover', text: 'hi' }, 400, 'VALIDATION_ERROR'],
    ['resolution on veo3-fast', 'video', { model: 'veo3-fast', prompt: 'x', resolution: '720p' }, 422, 'UNSUPPORTED_OPTION', 'resolution'],
    ['duration on veo3-fast', 'video', { model: 'veo3-fast', prompt: 'x', duration: '8' }, 422, 'UNSUPPORTED_OPTION', 'duration'],
    ['last frame on grok-video', 'video', { model: 'grok-video', prompt: 'x', duration: '6', resolution: '480p', first_frame_url: 'https://example.com/a.png', last_frame_url: 'https://example.com/b.png' }, 422, 'UNSUPPORTED_OPTION', 'last_frame_url'],
  ]
  for (const [name, kind, body, status, code, param] of cases) {
    const r = await gen(u, kind, body)
    assertError(t, r, status, code, name)
    if (param) t.equal(r.body.param, param, `${name}: param`)
    else t.ok(Array.isArray(r.body.details), `${name}: details`)
  }
  t.equal(await balance(s, u), 1000)
  t.equal(await jobCount(u), 0)
})

t.test('gemini-omni: asset ids must be the caller\'s (422 with param); owned assets are accepted', async (t) => {
  const u = await paidUser(s, 1000)
  const other = await paidUser(s, 10)
  const mk = async (id: number, kind: string) => (await s.req('POST', `/v1/admin/accounts/${id}/assets`, { admin: true, body: { kind, name: `${kind} one` } })).body.id as number
  const voice = await mk(u.id, 'voice')
  const character = await mk(u.id, 'character')
  const foreign = await mk(other.id, 'character')
  const body = (c: number[], v: number[]) => ({ model: 'gemini-omni', prompt: 'talking head', resolution: '1080p', duration: '4', character_asset_ids: c, voice_asset_ids: v })

  const r1 = await gen(u, 'video', body([foreign], [voice]))
  assertError(t, r1, 422, 'UNSUPPORTED_OPTION', 'another account\'s character')
  t.equal(r1.body.param, 'character_asset_ids')
  const r2 = await gen(u, 'video', body([character], [999999]))
  assertError(t, r2, 422, 'UNSUPPORTED_OPTION', 'unknown voice')
  t.equal(r2.body.param, 'voice_asset_ids')
  const r3 = await gen(u, 'video', body([voice], [voice]))
  assertError(t, r3, 422, 'UNSUPPORTED_OPTION', 'a voice used as a character')
  t.equal(r3.body.param, 'character_asset_ids')
  t.equal(await balance(s, u), 1000, 'nothing charged')

  const ok = await gen(u, 'video', body([character], [voice]))
  t.equal(ok.status, 201, ok.text)
  t.equal(ok.body.credits_charged, 120, 'gemini-omni 1080p 4s costs 120')
})

t.test('a voiceover that completes synchronously queues its job.completed webhook like an asynchronous job', async (t) => {
  const u = await paidUser(s, 500)
  const hook = { webhook_url: 'http://127.0.0.1:9/hook', webhook_secret: 'a-secret-of-16-chars' }
  const voice = await gen(u, 'audio', { model: 'voiceover', text: 'hello hook', voice_id: 'v', ...hook })
  t.equal(voice.status, 201, voice.text)
  t.equal(voice.body.status, 'completed')
  const music = await gen(u, 'audio', { model: 'music', title: 't', style: 'jazz', instrumental: true, ...hook })
  await pollJob(s, u, music.body.id)
  const rows = await sql`SELECT job_id, event, url FROM webhook_deliveries WHERE account_id = ${u.id} ORDER BY job_id`
  const byJob = Object.fromEntries(rows.map(r => [r.job_id, r]))
  t.match(byJob[music.body.id], { event: 'job.completed', url: hook.webhook_url }, 'music (asynchronous): queued at completion')
  t.match(byJob[voice.body.id], { event: 'job.completed', url: hook.webhook_url }, 'voiceover (synchronous): queued in the creating transaction')
  const [d] = await sql`SELECT body FROM webhook_deliveries WHERE job_id = ${voice.body.id}`
  t.match(JSON.parse(d.body), { type: 'job.completed', data: { job: { id: voice.body.id, status: 'completed', result_url: voice.body.result_url } } })
})

t.test('a generated webhook_secret comes once, in an answer no cache may store (Cache-Control: no-store); a replay does not repeat it', async (t) => {
  const u = await paidUser(s, 500)
  const mine = await gen(u, 'image', image('own secret', { webhook_url: 'http://127.0.0.1:9/hook', webhook_secret: 'a-secret-of-16-chars' }))
  t.equal(mine.status, 201)
  t.equal(mine.body.webhook_secret, undefined, 'the client\'s own secret is not echoed')
  const made = await gen(u, 'image', image('made secret', { webhook_url: 'http://127.0.0.1:9/hook' }), { 'idempotency-key': 'gen-secret-1' })
  t.equal(made.status, 201)
  t.match(made.body.webhook_secret, /^[0-9a-f]{64}$/)
  t.equal(made.headers.get('cache-control'), 'no-store')
  const again = await gen(u, 'image', image('made secret', { webhook_url: 'http://127.0.0.1:9/hook' }), { 'idempotency-key': 'gen-secret-1' })
  t.equal(again.status, 200)
  t.equal(again.body.webhook_secret, undefined, 'a replay does not show it again')
  const b = await s.req('POST', '/v1/batch', { key: u.key, body: { jobs: [{ type: 'image', ...image('batch secret', { webhook_url: 'http://127.0.0.1:9/hook' }) }] } })
  t.equal(b.status, 200)
  t.match(b.body.results[0].job.webhook_secret, /^[0-9a-f]{64}$/)
  t.equal(b.headers.get('cache-control'), 'no-store', 'a batch answer with a generated secret too')
})

t.test('locked credits: 403 NOT_ELIGIBLE, nothing charged', async (t) => {
  const u = await paidUser(s, 500)
  t.equal((await s.req('PATCH', `/v1/admin/accounts/${u.id}`, { admin: true, body: { credits_locked: true } })).status, 200)
  const r = await gen(u, 'image', image())
  assertError(t, r, 403, 'NOT_ELIGIBLE')
  t.equal(await jobCount(u), 0)
  t.equal((await s.req('PATCH', `/v1/admin/accounts/${u.id}`, { admin: true, body: { credits_locked: false } })).status, 200)
  t.equal((await gen(u, 'image', image())).status, 201, 'unlocked: allowed again')
})

t.test('refusals come in SPEC order: free trial before concurrency before balance', async (t) => {
  const s3 = limited
  // Free, trial used, at its concurrency cap, and out of credits: upgrade_required wins.
  const u = await createUser(s3, { credits: 120 })
  const v = await s3.req('POST', '/v1/generate/video', { key: u.key, body: video('[sim:queue]') })
  t.equal(v.status, 201)
  assertError(t, await s3.req('POST', '/v1/generate/video', { key: u.key, body: video() }), 403, 'upgrade_required', 'trial first')
  // At its cap and out of credits: concurrency wins over balance.
  assertError(t, await s3.req('POST', '/v1/generate/image', { key: u.key, body: image() }), 429, 'concurrency_limit_reached', 'concurrency before balance')
  await s3.req('DELETE', `/v1/jobs/${v.body.id}`, { key: u.key })
  const p = await paidUser(s3, 5)
  assertError(t, await s3.req('POST', '/v1/generate/image', { key: p.key, body: image() }), 402, 'INSUFFICIENT_CREDITS', 'then balance')
})
