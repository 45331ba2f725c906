// One URL policy for every webhook URL: a job's webhook_url gets exactly the
// checks POST /webhooks does, /etc/hosts names resolving to loopback included, and a slow
// resolver never makes a name acceptable (503 with Retry-After, not 201).
import t from 'tap'
import { startServer } from '../helpers/server.js'
import { balance, dbOf, FAST_ENV, image, paidUser, video } from '../helpers/jobs.js'
import { checkWebhookDestination } from '../../src/http/routes/webhooks.js'
import { ApiError } from '../../src/errors.js'

// This machine's /etc/hosts maps `vm` (its host name) to 127.0.0.1; checked, not assumed.
const { lookup } = await import('node:dns/promises')
const loopName = await lookup('vm', { all: true }).then(a => a.every(x => x.address.startsWith('127.')) ? 'vm' : null, () => null)

const s = await startServer(t, FAST_ENV)
const u = await paidUser(s, 10_000)
const sql = dbOf(t, s)

t.test('a job webhook_url whose host resolves to loopback is refused like POST /webhooks, nothing charged', { skip: loopName === null ? 'no /etc/hosts name for loopback here' : false }, async (t) => {
  const url = `https://${loopName}/hook`
  const reg = await s.req('POST', '/v1/webhooks', { key: u.key, body: { url, events: ['job.completed'] } })
  t.equal(reg.status, 422)
  t.match(reg.body, { error: true, code: 'UNSUPPORTED_OPTION', param: 'url' })
  const before = await balance(s, u)
  for (const [path, body] of [['/v1/generate/image', image('an owl', { webhook_url: url })], ['/v1/generate/video', video('an owl', { webhook_url: url })]] as const) {
    const r = await s.req('POST', path, { key: u.key, body })
    t.equal(r.status, 422, `${path}: 422`)
    t.match(r.body, { error: true, code: 'UNSUPPORTED_OPTION', param: 'webhook_url', message: /publicly routable/ })
  }
  t.equal(await balance(s, u), before, 'nothing charged')
  const [{ n }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM jobs WHERE account_id = ${u.id}`
  t.equal(n, 0, 'no job row')
})

t.test('literal forms stay refused for both, a name DNS says does not exist is accepted for both', async (t) => {
  for (const url of ['https://127.0.0.1/h', 'https://localhost/h', 'http://hooks.example.invalid/h', 'https://[::1]/h']) {
    const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: image('a fox', { webhook_url: url }) })
    t.equal(r.status, 422, `${url}: job 422`)
    const w = await s.req('POST', '/v1/webhooks', { key: u.key, body: { url, events: ['job.completed'] } })
    t.equal(w.status, 422, `${url}: webhook 422`)
  }
  const url = 'https://hooks.example.invalid/h' // .invalid never resolves (RFC 6761)
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: image('a fox', { webhook_url: url }) })
  t.equal(r.status, 201, 'job accepted; delivery-time check guards it')
  const w = await s.req('POST', '/v1/webhooks', { key: u.key, body: { url, events: ['job.completed'] } })
  t.equal(w.status, 201, 'webhook accepted')
})

t.test('the resolver decides: slow -> 503 with Retry-After after a bounded wait; non-public anywhere -> 422', async (t) => {
  const never = () => new Promise<never>(() => {})
  const started = Date.now()
  const e = await checkWebhookDestination('https://slow.example.com/h', [], 'webhook_url', never).then(() => null, (err: unknown) => err)
  const waited = Date.now() - started
  t.ok(e instanceof ApiError, 'refused, not accepted')
  t.equal((e as ApiError).code, 'SERVICE_UNAVAILABLE')
  t.equal((e as ApiError).headers?.['Retry-After'], '2')
  t.match((e as ApiError).message, /could not be checked/)
  t.ok(waited >= 1900 && waited < 3000, `bounded wait (${waited} ms)`)
  const tryAgain = () => Promise.reject(Object.assign(new Error('queryA EAI_AGAIN'), { code: 'EAI_AGAIN' }))
  t.equal(((await checkWebhookDestination('https://flaky.example.com/h', [], 'url', tryAgain).catch((x: ApiError) => x)) as ApiError).code, 'SERVICE_UNAVAILABLE', 'EAI_AGAIN is not "does not exist"')
  const mixed = async () => [{ address: '93.184.216.34', family: 4 }, { address: '10.0.0.5', family: 4 }]
  t.match(await checkWebhookDestination('https://mixed.example.com/h', [], 'url', mixed).catch((x: ApiError) => x), { code: 'UNSUPPORTED_OPTION', extra: { param: 'url' } })
  const pub = async () => [{ address: '93.184.216.34', family: 4 }]
  t.equal(await checkWebhookDestination('https://ok.example.com/h', [], 'url', pub), undefined, 'public: accepted')
})
