// Idempotency-Key, docs/api.md "Jobs" (Idempotency) and "Errors"; docs/architecture.md "Durability".
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { assertError } from '../helpers/assert.js'
import { startServer, type TestUser } from '../helpers/server.js'
import { rawRequest } from '../fixtures/raw-http.js'
import { balance, dbOf, FAST_ENV, image, ledger, paidUser, video } from '../helpers/jobs.js'

const s = await startServer(t, FAST_ENV)
const sql = dbOf(t, s)
const newKey = () => `idem-${randomBytes(8).toString('hex')}`
const post = (u: TestUser, path: string, body: unknown, key?: string) =>
  s.req('POST', path, { key: u.key, body, headers: key === undefined ? {} : { 'idempotency-key': key } })

async function charges (u: TestUser) {
  return (await ledger(sql, u.id)).filter(e => e.kind === 'charge')
}

t.test('a repeated request with the same key returns the original job: 200, replayed: true, same id, no new charge', async (t) => {
  const u = await paidUser(s, 1000)
  const k = newKey()
  const first = await post(u, '/v1/generate/video', video(), k)
  t.equal(first.status, 201)
  t.notOk('replayed' in first.body)
  const again = await post(u, '/v1/generate/video', video(), k)
  t.equal(again.status, 200, 'HTTP 200 on replay')
  t.equal(again.body.replayed, true)
  t.equal(again.body.id, first.body.id, 'the original job')
  t.equal(again.body.model, 'veo3-fast')
  t.equal(again.body.credits_charged, 120, 'reports the original charge')
  t.equal(again.body.remaining_credits, 880, 'and the balance, which did not move')
  t.equal(await balance(s, u), 880)
  t.equal((await charges(u)).length, 1, 'one charge entry')

  // Key order and whitespace of the JSON do not matter: the body is compared canonically.
  const reordered = await s.req('POST', '/v1/generate/video', {
    key: u.key, raw: '{ "aspect_ratio": "16:9",  "prompt": "a cat surfing a wave at sunset", "model": "veo3-fast" }',
    headers: { 'content-type': 'application/json', 'idempotency-key': k },
  })
  t.equal(reordered.status, 200)
  t.equal(reordered.body.id, first.body.id)

  // A synchronous voiceover replays with its result, as its 201 had it.
  const vk = newKey()
  const voice = await post(u, '/v1/generate/audio', { model: 'voiceover', text: 'replay me', voice_id: 'v' }, vk)
  t.equal(voice.status, 201)
  t.type(voice.body.result_url, 'string')
  const voice2 = await post(u, '/v1/generate/audio', { model: 'voiceover', text: 'replay me', voice_id: 'v' }, vk)
  t.equal(voice2.status, 200)
  t.same({ ...voice2.body, replayed: undefined, remaining_credits: undefined }, { ...voice.body, replayed: undefined, remaining_credits: undefined }, 'the same CreatedJob, result_url included')

  const noKey = await post(u, '/v1/generate/video', video())
  t.equal(noKey.status, 201, 'without a key the same body is a new job')
  t.not(noKey.body.id, first.body.id)

  // Keys are per account.
  const v = await paidUser(s, 1000)
  const theirs = await post(v, '/v1/generate/video', video(), k)
  t.equal(theirs.status, 201, 'another account can use the same key')
  t.not(theirs.body.id, first.body.id)
})

t.test('the same key with a different body (or route) is 409 IDEMPOTENCY_CONFLICT, nothing charged', async (t) => {
  const u = await paidUser(s, 1000)
  const k = newKey()
  t.equal((await post(u, '/v1/generate/image', image('one'), k)).status, 201)
  assertError(t, await post(u, '/v1/generate/image', image('two'), k), 409, 'IDEMPOTENCY_CONFLICT', 'different prompt')
  assertError(t, await post(u, '/v1/generate/image', image('one', { aspect_ratio: '1:1' }), k), 409, 'IDEMPOTENCY_CONFLICT', 'an added option')
  assertError(t, await post(u, '/v1/generate/video', video(), k), 409, 'IDEMPOTENCY_CONFLICT', 'another route')
  t.equal(await balance(s, u), 990)
  const orig = await post(u, '/v1/generate/image', image('one'), k)
  t.equal(orig.status, 200, 'the original body still replays')
})

t.test('a malformed Idempotency-Key is 400 INVALID_IDEMPOTENCY_KEY before anything is charged', async (t) => {
  const u = await paidUser(s, 1000)
  for (const [name, k] of [['201 characters', 'a'.repeat(201)], ['spaces', 'has space'], ['empty', ''], ['slash', 'a/b'], ['colon', 'a:b'], ['plus', 'a+b']] as const) {
    assertError(t, await post(u, '/v1/generate/image', image(), k), 400, 'INVALID_IDEMPOTENCY_KEY', name)
  }
  t.equal(await balance(s, u), 1000, 'nothing charged')
  const ok = await post(u, '/v1/generate/image', image(), 'A-z_0.9-'.padEnd(200, 'x'))
  t.equal(ok.status, 201, '200 characters of the allowed alphabet')
  const one = await post(u, '/v1/generate/image', image(), 'x')
  t.equal(one.status, 201, 'one character')
  assertError(t, await post(u, '/v1/extend/video', { job_id: 'job_x', prompt: 'p' }, 'bad key'), 400, 'INVALID_IDEMPOTENCY_KEY', 'extend checks it too')
  assertError(t, await post(u, '/v1/batch', { jobs: [{ type: 'image', ...image() }] }, 'bad key'), 400, 'INVALID_IDEMPOTENCY_KEY', 'batch checks it too')
})

t.test('a non-ASCII Idempotency-Key is 400 INVALID_IDEMPOTENCY_KEY, not silently shortened', { todo: 'uWS hands src/http/server.ts header values with non-ASCII bytes dropped or replaced: "clé" (UTF-8 or latin1 bytes) arrives as "cl" and is accepted; reported to the lead' }, async (t) => {
  const u = await paidUser(s, 1000)
  const latin1 = await post(u, '/v1/generate/image', image(), 'cl\u00e9')
  t.equal(latin1.status, 400, `latin1 byte: answered ${latin1.status}`)
  const body = JSON.stringify(image())
  const utf8 = await rawRequest(s.app.port, 'POST', '/v1/generate/image', [
    ['x-api-key', u.key], ['content-type', 'application/json'], ['content-length', String(Buffer.byteLength(body))],
    ['idempotency-key', Buffer.from('clé', 'utf8')],
  ], body)
  t.equal(utf8.status, 400, `UTF-8 bytes: answered ${utf8.status}`)
})

t.test('50 concurrent identical requests with one key: exactly one job, one charge, 49 replays', async (t) => {
  const u = await paidUser(s, 1000)
  const k = newKey()
  const rs = await Promise.all(Array.from({ length: 50 }, () => post(u, '/v1/generate/video', video(), k)))
  const created = rs.filter(r => r.status === 201)
  const replays = rs.filter(r => r.status === 200 && r.body.replayed === true)
  t.equal(created.length, 1, 'one 201')
  t.equal(replays.length, 49, '49 replays')
  t.equal(new Set(rs.map(r => r.body.id)).size, 1, 'all name the same job')
  const [{ n }] = await sql`SELECT count(*)::int AS n FROM jobs WHERE account_id = ${u.id}`
  t.equal(n, 1, 'one job row')
  t.equal((await charges(u)).length, 1, 'one charge entry')
  t.equal(await balance(s, u), 880)
})

t.test('a 402 is not remembered: the same key succeeds after a top-up', async (t) => {
  const u = await paidUser(s, 5)
  const k = newKey()
  assertError(t, await post(u, '/v1/generate/image', image(), k), 402, 'INSUFFICIENT_CREDITS')
  const g = await s.req('POST', `/v1/admin/accounts/${u.id}/grants`, { admin: true, body: { credits: 100 } })
  t.equal(g.status, 201)
  const r = await post(u, '/v1/generate/image', image(), k)
  t.equal(r.status, 201, 'created on retry')
  t.equal(r.body.remaining_credits, 95)
  const replay = await post(u, '/v1/generate/image', image(), k)
  t.equal(replay.status, 200)
  t.equal(replay.body.id, r.body.id)
})

t.test('a 502 (provider refused) is not remembered; a 504 keeps its key bound to the created job', async (t) => {
  const u = await paidUser(s, 1000)
  const k = newKey()
  assertError(t, await post(u, '/v1/generate/image', image('[sim:reject]'), k), 502, 'PROVIDER_ERROR')
  assertError(t, await post(u, '/v1/generate/image', image('[sim:reject]'), k), 502, 'PROVIDER_ERROR', 'retried, refused again')
  t.equal(await balance(s, u), 1000)

  const k2 = newKey()
  const slow = await post(u, '/v1/generate/image', image('[sim:timeout]'), k2)
  assertError(t, slow, 504, 'GATEWAY_TIMEOUT')
  const id = slow.body.details.job_id
  const retry = await post(u, '/v1/generate/image', image('[sim:timeout]'), k2)
  t.equal(retry.status, 200, 'a retry with the same key replays the job the 504 named')
  t.equal(retry.body.replayed, true)
  t.equal(retry.body.id, id)
  t.equal(await balance(s, u), 990, 'charged once')
})

t.test('batch: an Idempotency-Key replays the whole batch result without new charges', async (t) => {
  const u = await paidUser(s, 1000)
  const k = newKey()
  const body = { jobs: [{ type: 'image', ...image('a') }, { type: 'video', ...video() }, { type: 'image', model: 'nope', prompt: 'x' }] }
  const first = await post(u, '/v1/batch', body, k)
  t.equal(first.status, 200, first.text)
  t.equal(first.body.credits_charged, 130)
  t.notOk(first.body.replayed)
  const again = await post(u, '/v1/batch', body, k)
  t.equal(again.status, 200)
  t.equal(again.body.replayed, true)
  t.same(again.body.results, first.body.results, 'the same per-item results, job ids included')
  t.equal(again.body.credits_charged, 130)
  t.equal(await balance(s, u), 870, 'charged once')
  t.equal((await charges(u)).length, 2)

  assertError(t, await post(u, '/v1/batch', { jobs: [{ type: 'image', ...image('b') }] }, k), 409, 'IDEMPOTENCY_CONFLICT', 'different batch, same key')

  const k2 = newKey()
  const rs = await Promise.all(Array.from({ length: 10 }, () => post(u, '/v1/batch', { jobs: [{ type: 'image', ...image('c') }] }, k2)))
  t.ok(rs.every(r => r.status === 200), 'concurrent duplicates all answer 200')
  t.equal(rs.filter(r => !r.body.replayed).length, 1, 'one ran')
  t.equal(new Set(rs.map(r => r.body.results[0].job.id)).size, 1, 'one job')
  t.equal(await balance(s, u), 860)
})
