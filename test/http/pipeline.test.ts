// The request pipeline's synchronous stages (src/http/server.ts, docs/architecture.md "Request
// pipeline") without a server: the real HttpServer, Authenticator (caches filled), JobCache,
// RateLimiter, Metering (columns, never flushed) and Metrics, driven through the handlers it
// registers, with stand-in uWS request and response objects. What is checked: one request id
// per request whichever stage answers, one header write for an answer from memory, one metering
// row per request, and a request memory cannot answer reaching the asynchronous stages with
// nothing done twice.
import t from 'tap'
import { pino } from 'pino'
import { HttpServer } from '../../src/http/server.js'
import { HEADER_NAMES } from '../../src/http/fast-headers.js'
import { Authenticator } from '../../src/http/auth.js'
import { generateKey } from '../../src/http/api-key.js'
import { JobCache } from '../../src/jobs/cache.js'
import { RateLimiter } from '../../src/http/rate-limit.js'
import { Metering } from '../../src/metering.js'
import { Metrics } from '../../src/metrics.js'
import type { MeterColumns } from '../../src/db/metering.js'
import { routes as jobRoutes } from '../../src/http/routes/jobs.js'
import { routes as catalogRoutes } from '../../src/http/routes/catalog.js'
import type { Services } from '../../src/services.js'
import type { JobView } from '../../src/jobs/view.js'

const log = pino({ level: 'warn' })
const sql = { begin: async () => {} } as unknown as ConstructorParameters<typeof Authenticator>[0]
const auth = new Authenticator(sql, 'x'.repeat(40), 'admin-token-0123456789', 3_600_000)
const jobs = new JobCache()
const now = Date.now()
const internals = auth as unknown as { keys: Map<string, unknown>; accounts: Map<number, unknown> }
const users = [1, 2].map((id) => {
  const { key, hash } = generateKey()
  internals.keys.set(hash, { v: { id: id * 10, accountId: id, scopes: ['generate', 'read'], expiresAt: null, revoked: false }, at: now })
  internals.accounts.set(id, {
    v: { id, email: `a${id}@x`, banned: false, hasPurchased: true, enterprise: false, emailVerified: true, creditsLocked: false, passwordChangedAtMs: null },
    at: now,
  })
  return { id, keyId: id * 10, key }
})
const stamp = new Date(now).toISOString()
const view: JobView = {
  id: 'job_0000000000000001', status: 'completed', type: 'image', model: 'nano-banana', prompt: 'a lighthouse', progress: 100, credits_charged: 10,
  credits_refunded: 0, estimated_seconds: 15, result_url: 'https://files.example/1.png', error_message: null, content_policy_violation: false,
  created_at: stamp, updated_at: stamp, completed_at: stamp,
}
jobs.update(users[0].id, view)

const metering = new Metering(sql, log, auth.lastUsed, 30, 3_600_000)
const limiter = new RateLimiter()
const tierLimits = { free: { rpm: 1000 }, pro: { rpm: 1000 }, enterprise: { rpm: 1000 } }
const services = { config: { tierLimits }, auth, jobs, limiter, redisLimiter: null, metering, log, metrics: new Metrics() } as unknown as Services
// Nothing is written (there is no database): the rows are dropped before the metering closes.
t.teardown(async () => { limiter.close(); rows().reset(); auth.lastUsed.clear(); await metering.close() })

const jobRoute = jobRoutes.find(r => r.method === 'GET' && r.path === '/v1/jobs/:id')!
const modelsRoute = catalogRoutes.find(r => r.path === '/v1/models')!
const server = new HttpServer(services, [])
// The handlers as uWS would call them: the routes registered again on a recording stand-in App.
const handlers = new Map<string, (res: unknown, req: unknown) => void>()
const s = server as unknown as { app: unknown; register: (r: typeof jobRoute) => void; handle: (c: unknown, ex: unknown, req: unknown) => void }
s.app = {
  get: (p: string, h: (res: unknown, req: unknown) => void) => { handlers.set(`GET ${p}`, h) },
  head: (p: string, h: (res: unknown, req: unknown) => void) => { handlers.set(`HEAD ${p}`, h) },
}
s.register(jobRoute)
s.register(modelsRoute)
// The asynchronous stages, recorded instead of run.
const continued: Array<{ requestId: string; method: string; caller: unknown; limit: number }> = []
s.handle = (_c, ex) => {
  const e = ex as { reqNum: number; given: string | null; method: string; caller: unknown; limit: number }
  continued.push({ requestId: e.given ?? `req_${metering.reqPrefix}${e.reqNum.toString(36)}`, method: e.method, caller: e.caller, limit: e.limit })
}

interface Answer { status: string; headers: Array<[string, string]>; body: string | null; length: number; corked: boolean }

/** Calls the handler of `method path` with a stand-in request; returns what it wrote. */
function call (method: string, path: string, o: { key?: string; accept?: string; id?: string; param?: string; query?: string; inm?: string } = {}): Answer {
  const h = handlers.get(`${method} ${path}`)!
  const a: Answer = { status: '200 OK', headers: [], body: null, length: -1, corked: false }
  const text = (v: string | Uint8Array) => typeof v === 'string' ? v : Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('latin1')
  const res = {
    writeStatus (st: string) { a.status = st; return res },
    writeHeader (k: string | Uint8Array, v: string | Uint8Array) { a.headers.push([text(k), text(v)]); return res },
    end (b: Buffer | string) { a.body = String(b); a.length = Buffer.byteLength(b); return res },
    endWithoutBody (n: number) { a.length = n; return res },
    onAborted () { return res },
    cork (f: () => void) { a.corked = true; f(); return res },
  }
  const given: Array<[Uint8Array, string | undefined]> = [
    [HEADER_NAMES.apiKey, o.key], [HEADER_NAMES.accept, o.accept], [HEADER_NAMES.requestId, o.id], [HEADER_NAMES.ifNoneMatch, o.inm],
  ]
  const req = {
    getHeader: (name: unknown) => given.find(([n]) => n === name)?.[1] ?? '',
    getQuery: () => o.query,
    getParameter: () => o.param,
    getUrl: () => path.replace(':id', o.param ?? ''),
  }
  h(res, req)
  return a
}

/** Every header line of an answer, the block of one X-Request-Id line split into its lines. */
function lines (a: Answer): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, v] of a.headers) {
    const [first, ...rest] = v.split('\r\n')
    out[k.toLowerCase()] = first
    for (const l of rest) { const i = l.indexOf(': '); out[l.slice(0, i).toLowerCase()] = l.slice(i + 2) }
  }
  return out
}

const rows = () => (metering as unknown as { buf: MeterColumns }).buf
function lastRow () {
  const b = rows()
  const i = b.length - 1
  return { method: b.method(i), endpoint: b.endpoint(i), status: b.status[i], account: b.account[i], key: b.key[i], requestId: b.requestId(i) }
}
const counter = (id: string) => parseInt(id.slice(`req_${metering.reqPrefix}`.length), 36)

t.test('a cached read is answered from memory: one header write, the rate window counted, one row under the requested path', async (t) => {
  const before = rows().length
  const a = call('GET', '/v1/jobs/:id', { key: users[0].key, param: view.id })
  t.equal(a.headers.length, 1, 'one header write')
  t.equal(a.headers[0][0], 'X-Request-Id')
  t.notOk(a.corked, 'written inside the handler, no cork')
  t.equal(a.body, JSON.stringify(view))
  const h = lines(a)
  t.match(h['x-request-id'], new RegExp(`^req_${metering.reqPrefix}[0-9a-z]+$`))
  t.same(h, {
    'x-request-id': h['x-request-id'], 'x-ratelimit-limit': '1000', 'x-ratelimit-remaining': '999', 'access-control-allow-origin': '*',
    'content-type': 'application/json; charset=utf-8', 'x-content-type-options': 'nosniff',
  })
  t.equal(rows().length, before + 1, 'one metering row')
  t.same(lastRow(), { method: 'GET', endpoint: `/v1/jobs/${view.id}`, status: 200, account: users[0].id, key: users[0].keyId, requestId: h['x-request-id'] })

  const toon = call('GET', '/v1/jobs/:id', { key: users[0].key, param: view.id, accept: 'application/toon', id: 'client.id-1' })
  const ht = lines(toon)
  t.equal(ht['x-request-id'], 'client.id-1', 'a client id is echoed')
  t.equal(ht['content-type'], 'application/toon; charset=utf-8')
  t.equal(ht['x-toon-dict'], 'none')
  t.equal(ht['x-ratelimit-remaining'], '998')
  t.same(lastRow(), { method: 'GET', endpoint: `/v1/jobs/${view.id}`, status: 200, account: users[0].id, key: users[0].keyId, requestId: 'client.id-1' })

  const head = call('HEAD', '/v1/jobs/:id', { key: users[0].key, param: view.id })
  t.equal(head.body, null, 'HEAD: no body')
  t.equal(head.length, Buffer.byteLength(JSON.stringify(view)), 'HEAD: the GET answer\'s length')
  t.same(lastRow(), { method: 'HEAD', endpoint: `/v1/jobs/${view.id}`, status: 200, account: users[0].id, key: users[0].keyId, requestId: lines(head)['x-request-id'] })
  t.equal(continued.length, 0, 'nothing reached the asynchronous stages')
})

t.test('what memory cannot answer reaches the asynchronous stages with its one request id, not counted nor recorded', async (t) => {
  const first = lines(call('GET', '/v1/jobs/:id', { key: users[0].key, param: view.id }))['x-request-id']
  const n = rows().length
  const cases = [
    { key: users[1].key, param: view.id }, // another account's job
    { key: users[0].key, param: 'job_missing' }, // not cached
    { key: users[0].key, param: view.id, query: 'full=1' }, // a query string
    { key: 'gj_not-a-key', param: view.id }, // a key the caches do not know
    { param: view.id }, // no credential
  ]
  for (const o of cases) call('GET', '/v1/jobs/:id', o)
  const last = lines(call('GET', '/v1/jobs/:id', { key: users[0].key, param: view.id }))['x-request-id']
  t.equal(continued.length, cases.length, 'each went on')
  t.same(continued.map(c => counter(c.requestId)), cases.map((_, i) => counter(first) + 1 + i), 'one counter value each, in order')
  t.equal(counter(last), counter(first) + cases.length + 1, 'none took a second id')
  t.ok(continued.every(c => c.caller === null && c.limit === -1 && c.method === 'GET'), 'no caller kept, no window counted')
  t.equal(rows().length, n + 1, 'only the answered read was recorded (the others record when they answer)')
  t.equal(lines(call('GET', '/v1/jobs/:id', { key: users[0].key, param: view.id }))['x-ratelimit-remaining'], String(1000 - 6), 'only the answers counted in the window')
  continued.length = 0
})

t.test('a constant route: the precomputed answer in one header write, no rate lines, metered under its pattern with no account', async (t) => {
  for (const accept of ['application/json', 'application/toon']) {
    const a = call('GET', '/v1/models', { accept })
    t.equal(a.headers.length, 1, 'one header write')
    const h = lines(a)
    t.match(h.etag, accept === 'application/toon' ? /-toon"$/ : /"$/)
    t.equal(h.vary, 'Accept')
    t.ok(h['cache-control'])
    t.equal(h['x-content-type-options'], 'nosniff')
    t.equal(h['access-control-allow-origin'], '*')
    t.equal(h['x-ratelimit-limit'], undefined, 'a public route counts no window')
    t.equal(h['content-type'], `${accept}; charset=utf-8`)
    t.same(lastRow(), { method: 'GET', endpoint: '/v1/models', status: 200, account: NaN, key: NaN, requestId: h['x-request-id'] })
  }
  const head = call('HEAD', '/v1/models', { id: 'models-head' })
  t.equal(head.body, null)
  t.ok(head.length > 0)
  t.same(lastRow(), { method: 'HEAD', endpoint: '/v1/models', status: 200, account: NaN, key: NaN, requestId: 'models-head' })
  call('GET', '/v1/models', { inm: '"x"' })
  t.equal(continued.length, 1, 'If-None-Match goes on to the handler')
  continued.length = 0
})

t.test('a refusal of the rate window from memory is the ordinary error answer, recorded once under the route pattern', async (t) => {
  tierLimits.pro.rpm = 0
  t.teardown(() => { tierLimits.pro.rpm = 1000 })
  const n = rows().length
  const a = call('GET', '/v1/jobs/:id', { key: users[1].key, param: view.id, id: 'refused-1' })
  // users[1] does not own the job: memory cannot answer it, so it goes on un-refused.
  t.equal(continued.length, 1)
  continued.length = 0
  t.equal(a.headers.length, 0)
  jobs.update(users[1].id, { ...view, id: 'job_0000000000000002' })
  const r = call('GET', '/v1/jobs/:id', { key: users[1].key, param: 'job_0000000000000002', id: 'refused-2' })
  t.equal(r.status, '429 Too Many Requests')
  t.ok(r.corked, 'written as every error answer is')
  const h = lines(r)
  t.equal(h['x-request-id'], 'refused-2')
  t.equal(h['x-ratelimit-limit'], '0')
  t.equal(h['x-ratelimit-remaining'], '0')
  t.ok(Number(h['retry-after']) >= 1)
  t.equal(JSON.parse(r.body!).code, 'RATE_LIMIT_EXCEEDED')
  t.equal(rows().length, n + 1)
  t.same(lastRow(), { method: 'GET', endpoint: '/v1/jobs/:id', status: 429, account: users[1].id, key: users[1].keyId, requestId: 'refused-2' })
})
