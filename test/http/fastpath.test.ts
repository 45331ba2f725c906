// The synchronous fast paths of src/http/server.ts: GET/HEAD of constant public
// routes (the catalogue) and of cached authenticated reads (GET /v1/jobs/{id}) answer with the
// same status, headers, body and metering row as the full pipeline, which a query string or
// If-None-Match forces.
import t from 'tap'
import postgres from 'postgres'
import { startServer, type TestServer } from '../helpers/server.js'
import { FAST_ENV, image, paidUser, pollJob } from '../helpers/jobs.js'

/** Header names and values that must agree between two answers (Date and the request id differ). */
function headerSet (h: Headers, drop: string[] = []): Record<string, string> {
  const out: Record<string, string> = {}
  h.forEach((v, k) => { if (!['date', 'x-request-id', ...drop].includes(k)) out[k] = v })
  return out
}

async function meterRow (s: TestServer, requestId: string) {
  await s.app.services.metering.flush()
  const sql = postgres(s.databaseUrl, { max: 1 })
  try {
    const rows = await sql<any[]>`SELECT account_id::int, key_id::int, method, endpoint, status, credits FROM request_log WHERE request_id = ${requestId}`
    return [...rows]
  } finally { await sql.end() }
}

const s = await startServer(t, FAST_ENV)

t.test('GET /v1/jobs/{id} from the caches answers as the full pipeline does, JSON and TOON, and meters the same row', async (t) => {
  const u = await paidUser(s, 1000)
  const c = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  t.equal(c.status, 201)
  await pollJob(s, u, c.body.id)
  t.ok(s.app.services.jobs.get(c.body.id), 'the view is cached (the fast path can answer)')
  for (const accept of ['application/json', 'application/toon']) {
    const fast = await s.req('GET', `/v1/jobs/${c.body.id}`, { key: u.key, headers: { accept, 'x-request-id': `fast-${accept.slice(12)}` } })
    const full = await s.req('GET', `/v1/jobs/${c.body.id}?full=1`, { key: u.key, headers: { accept, 'x-request-id': `full-${accept.slice(12)}` } })
    t.equal(fast.status, 200)
    t.equal(full.status, 200)
    t.equal(fast.text, full.text, `${accept}: same body`)
    t.equal(fast.headers.get('x-request-id'), `fast-${accept.slice(12)}`, 'a client request id is echoed')
    t.same(headerSet(fast.headers, ['x-ratelimit-remaining']), headerSet(full.headers, ['x-ratelimit-remaining']), `${accept}: same headers`)
    t.equal(Number(fast.headers.get('x-ratelimit-remaining')) - 1, Number(full.headers.get('x-ratelimit-remaining')), 'both counted in the window')
    t.equal(fast.headers.get('x-ratelimit-limit'), String(s.app.services.config.tierLimits.pro.rpm))
    t.equal(fast.headers.get('access-control-allow-origin'), '*')
    if (accept === 'application/toon') t.equal(fast.headers.get('x-toon-dict'), 'none')
    const a = await meterRow(s, `fast-${accept.slice(12)}`)
    const b = await meterRow(s, `full-${accept.slice(12)}`)
    t.equal(a.length, 1)
    t.same(a, b, 'identical metering rows')
    t.same(a[0], { account_id: u.id, key_id: u.keyId, method: 'GET', endpoint: `/v1/jobs/${c.body.id}`, status: 200, credits: 0 })
  }
  const get = await s.req('GET', `/v1/jobs/${c.body.id}`, { key: u.key })
  const head = await fetch(`${s.url}/v1/jobs/${c.body.id}`, { method: 'HEAD', headers: { 'x-api-key': u.key } })
  t.equal(head.status, 200)
  t.equal(head.headers.get('content-length'), String(Buffer.byteLength(get.text)))
  t.equal(await head.text(), '')
  t.match(get.headers.get('x-request-id'), /^req_[0-9a-f]{8}[0-9a-z]+$/, 'a generated request id')
  const rows = await meterRow(s, get.headers.get('x-request-id')!)
  t.equal(rows.length, 1, 'a generated request id is metered as sent')
})

t.test('a view replaced in the cache is answered anew in both formats: bytes made for the old view are never served', async (t) => {
  const u = await paidUser(s, 1000)
  const c = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  const done = await pollJob(s, u, c.body.id)
  const cache = s.app.services.jobs
  const before: Record<string, string> = {}
  for (const accept of ['application/json', 'application/toon']) {
    before[accept] = (await s.req('GET', `/v1/jobs/${c.body.id}`, { key: u.key, headers: { accept } })).text
  }
  t.equal(JSON.parse(before['application/json']).status, done.job.status)
  t.ok(cache.entry(c.body.id)?.json, 'the entry holds the JSON bytes it was answered with')
  // A newer view of the same job (as an event would bring): a new entry, no bytes yet.
  cache.update(u.id, { ...cache.get(c.body.id)!.view, error_message: 'replaced view' })
  t.equal(cache.entry(c.body.id)?.json, undefined)
  for (const accept of ['application/json', 'application/toon']) {
    const after = await s.req('GET', `/v1/jobs/${c.body.id}`, { key: u.key, headers: { accept } })
    const full = await s.req('GET', `/v1/jobs/${c.body.id}?full=1`, { key: u.key, headers: { accept } })
    t.not(after.text, before[accept], `${accept}: the new view, not the old bytes`)
    t.match(after.text, /replaced view/)
    t.equal(after.text, full.text, `${accept}: the same body as the full pipeline`)
  }
})

t.test('what the caches cannot answer still gets the full pipeline\'s answer', async (t) => {
  const u = await paidUser(s, 1000)
  const other = await paidUser(s, 1000)
  const c = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  await pollJob(s, u, c.body.id)
  const theirs = await s.req('GET', `/v1/jobs/${c.body.id}`, { key: other.key })
  t.equal(theirs.status, 404)
  t.equal(theirs.body.code, 'JOB_NOT_FOUND')
  const bad = await s.req('GET', `/v1/jobs/${c.body.id}`, { key: u.key.slice(0, -1) + (u.key.endsWith('a') ? 'b' : 'a') })
  t.equal(bad.status, 401)
  t.equal(bad.body.code, 'INVALID_API_KEY')
  const none = await s.req('GET', `/v1/jobs/${c.body.id}`)
  t.equal(none.status, 401)
  const q = await s.req('GET', `/v1/jobs/${c.body.id}?api_key=${u.key}`, { key: u.key })
  t.equal(q.status, 401)
  t.equal(q.body.code, 'INVALID_API_KEY')
  const bearer = await s.req('GET', `/v1/jobs/${c.body.id}`, { headers: { authorization: `Bearer ${u.key}` } })
  t.equal(bearer.status, 200, 'a key as a bearer token')
  t.equal(bearer.body.id, c.body.id)
  const jwt = await s.req('GET', `/v1/jobs/${c.body.id}`, { jwt: u.jwt })
  t.equal(jwt.status, 200, 'a session')
  // A revoked key is refused at once (its cache entry is invalidated).
  const r = await s.req('DELETE', `/v1/auth/keys/${u.keyId}`, { jwt: u.jwt })
  t.ok(r.status === 200 || r.status === 204, `revoke: ${r.status}`)
  const after = await s.req('GET', `/v1/jobs/${c.body.id}`, { key: u.key })
  t.equal(after.status, 401)
})

t.test('a POST with a cached key takes the cached caller: the same answers and refusals as authenticate', async (t) => {
  const u = await paidUser(s, 1000)
  const first = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  t.equal(first.status, 201, 'the first creation loads the key and account')
  const again = await s.req('POST', '/v1/generate/image', { key: u.key, body: image(), headers: { 'x-request-id': 'post-cached' } })
  t.equal(again.status, 201)
  t.equal(again.body.remaining_credits, first.body.remaining_credits - again.body.credits_charged)
  t.equal(again.headers.get('x-ratelimit-limit'), String(s.app.services.config.tierLimits.pro.rpm))
  t.same(await meterRow(s, 'post-cached'), [{ account_id: u.id, key_id: u.keyId, method: 'POST', endpoint: '/v1/generate/image', status: 201, credits: again.body.credits_charged }])
  const bearer = await s.req('POST', '/v1/generate/image', { headers: { authorization: `Bearer ${u.key}` }, body: image() })
  t.equal(bearer.status, 201, 'the key as a bearer token')
  const q = await s.req('POST', `/v1/generate/image?api_key=${u.key}`, { key: u.key, body: image() })
  t.equal(q.status, 401, 'a key in the query string is refused even when the header key is cached')
  t.equal(q.body.code, 'INVALID_API_KEY')
  const r = await s.req('DELETE', `/v1/auth/keys/${u.keyId}`, { jwt: u.jwt })
  t.ok(r.status === 200 || r.status === 204, `revoke: ${r.status}`)
  const after = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  t.equal(after.status, 401, 'a revoked key is refused at once')
  t.equal(after.body.code, 'INVALID_API_KEY')
})

t.test('GET /v1/models: the precomputed answer equals the full pipeline\'s, and If-None-Match still gets 304', async (t) => {
  for (const accept of ['application/json', 'application/toon']) {
    const fast = await s.req('GET', '/v1/models', { headers: { accept, 'x-request-id': `models-${accept.slice(12)}` } })
    const full = await s.req('GET', '/v1/models', { headers: { accept, 'if-none-match': '"nothing"', 'x-request-id': `models-full-${accept.slice(12)}` } })
    t.equal(fast.status, 200)
    t.equal(full.status, 200)
    t.equal(fast.text, full.text)
    t.same(headerSet(fast.headers), headerSet(full.headers), `${accept}: same headers`)
    t.ok(fast.headers.get('etag'))
    const again = await s.req('GET', '/v1/models', { headers: { accept, 'if-none-match': fast.headers.get('etag')! } })
    t.equal(again.status, 304)
    const a = await meterRow(s, `models-${accept.slice(12)}`)
    const b = await meterRow(s, `models-full-${accept.slice(12)}`)
    t.same(a, b)
    t.same(a, [{ account_id: null, key_id: null, method: 'GET', endpoint: '/v1/models', status: 200, credits: 0 }])
  }
  const head = await fetch(`${s.url}/v1/credits/pricing`, { method: 'HEAD', headers: { 'x-request-id': 'pricing-head' } })
  const get = await s.req('GET', '/v1/credits/pricing')
  t.equal(head.status, 200)
  t.equal(head.headers.get('content-length'), String(Buffer.byteLength(get.text)))
  t.same(await meterRow(s, 'pricing-head'), [{ account_id: null, key_id: null, method: 'HEAD', endpoint: '/v1/credits/pricing', status: 200, credits: 0 }])
})

t.test('the fast path counts the rate window exactly: rpm requests pass, the rest get 429 with Retry-After', async (t) => {
  const rpm = 25
  // One front end: the test lowers the limit in thread 0's config (TEST_FRONTENDS=2 would leave
  // the other thread's at 10^6; test/http/front-ends/frontends.test.ts covers exactness across threads).
  const s2 = await startServer(t, { ...FAST_ENV, FRONTENDS: '1', TIER_LIMITS: JSON.stringify({ pro: { rpm: 1_000_000 } }) })
  const u = await paidUser(s2, 1000)
  const c = await s2.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  await pollJob(s2, u, c.body.id)
  s2.app.services.config.tierLimits.pro.rpm = rpm
  const answers = await Promise.all(Array.from({ length: rpm + 10 }, () => s2.req('GET', `/v1/jobs/${c.body.id}`, { key: u.key })))
  const ok = answers.filter(a => a.status === 200)
  const limited = answers.filter(a => a.status === 429)
  // The window already holds the requests above (polls); those count too.
  t.ok(ok.length <= rpm, `${ok.length} passed`)
  t.equal(ok.length + limited.length, answers.length, 'every answer a 200 or a 429')
  t.ok(limited.length >= 10)
  for (const a of limited) {
    t.equal(a.body.code, 'RATE_LIMIT_EXCEEDED')
    t.ok(Number(a.headers.get('retry-after')) >= 1)
    t.equal(a.headers.get('x-ratelimit-remaining'), '0')
    t.equal(a.headers.get('x-ratelimit-limit'), String(rpm))
  }
  const remaining = ok.map(a => Number(a.headers.get('x-ratelimit-remaining'))).sort((x, y) => x - y)
  t.same(remaining, Array.from({ length: ok.length }, (_, i) => i), 'each pass saw its own count, down to 0')
})
