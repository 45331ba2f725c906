// Webhook delivery rules without a database: signing (docs/api.md "Webhooks",
// src/webhooks/signing.ts), the retry schedule (src/webhooks/retry-schedule.ts) and how an answer
// ends an attempt (src/webhooks/delivery.ts). The address rules are tested in test/net.
import { createHmac } from 'node:crypto'
import t from 'tap'
import { classifyStatus, outcomeOf } from '../../src/webhooks/delivery.js'
import { MAX_ATTEMPTS, RETRY_SCHEDULE_S, retryDelayMs } from '../../src/webhooks/retry-schedule.js'
import { basicAuthOf, deliveryHeaderList, deliveryHeaders, deliveryTarget, signatureHeader } from '../../src/webhooks/signing.js'
import { verify } from '../fixtures/webhook-receiver.js'

const secret = 'whsec-test-0123456789abcdef'
const body = JSON.stringify({ id: 'evt_1', type: 'job.completed', created_at: '2025-01-01T00:00:00.000Z', data: { job: { id: 'job_1' } } })

t.test('signature is t=<unix seconds>,sha256=<hex HMAC-SHA256(secret, t + "." + body)>', async t => {
  const ts = 1_700_000_000
  const h = signatureHeader(secret, body, ts)
  t.match(h, /^t=1700000000,sha256=[0-9a-f]{64}$/)
  const hex = createHmac('sha256', secret).update(`${ts}.${body}`).digest('hex')
  t.equal(h, `t=${ts},sha256=${hex}`, 'HMAC over "<t>.<raw body>"')
  t.not(signatureHeader(secret, body + ' ', ts), h, 'any byte of the body changes it')
  t.not(signatureHeader(secret, body, ts + 1), h, 't is signed too')
  t.not(signatureHeader(secret + 'x', body, ts), h, 'the secret keys it')
  t.equal(verify(secret, signatureHeader(secret, body, Math.floor(Date.now() / 1000)), body), null, 'the receiver fixture accepts a fresh one')
  t.equal(verify(secret, signatureHeader(secret, body, Math.floor(Date.now() / 1000) - 301), body), 'timestamp older than 300 s', 'and rejects one older than 300 s')
  t.equal(verify('another-secret-0000', signatureHeader(secret, body, Math.floor(Date.now() / 1000)), body), 'bad signature')
})

t.test('attempt headers: content type, event, delivery id, signature, user agent', async t => {
  const h = deliveryHeaders({ id: 'dlv_abc', event: 'job.failed', secret, body }, 1_700_000_000, 'genjobs-webhooks/1.0.0')
  t.same(Object.keys(h).sort(), ['content-type', 'user-agent', 'x-service-delivery', 'x-service-event', 'x-service-signature'])
  t.equal(h['content-type'], 'application/json')
  t.equal(h['x-service-event'], 'job.failed')
  t.equal(h['x-service-delivery'], 'dlv_abc')
  t.equal(h['x-service-signature'], signatureHeader(secret, body, 1_700_000_000))
  t.equal(h['user-agent'], 'genjobs-webhooks/1.0.0')
})

t.test('the header list is the same pairs, with authorization when the URL had credentials', async t => {
  const d = { id: 'dlv_abc', event: 'job.completed', secret, body }
  const list = deliveryHeaderList(d, 1_700_000_000, 'ua/1', null)
  t.same(Object.fromEntries(Array.from({ length: list.length / 2 }, (_, i) => [list[2 * i], list[2 * i + 1]])), deliveryHeaders(d, 1_700_000_000, 'ua/1'))
  const withAuth = deliveryHeaderList(d, 1_700_000_000, 'ua/1', 'Basic YTpi')
  t.same(withAuth.slice(-2), ['authorization', 'Basic YTpi'])
  t.equal(deliveryHeaders(d, 1_700_000_000, 'ua/1', 'Basic YTpi').authorization, 'Basic YTpi')
})

t.test('credentials in the URL become Authorization: Basic and leave the URL', async t => {
  const u = new URL('https://ada:s%3Acret@hooks.example.com/x')
  t.equal(basicAuthOf(u), `Basic ${Buffer.from('ada:s:cret').toString('base64')}`)
  t.equal(u.href, 'https://hooks.example.com/x')
  t.equal(basicAuthOf(new URL('https://hooks.example.com/x')), null)
})

t.test('deliveryTarget: the address policy first, then no fragment and credentials as Authorization', async t => {
  const ok = deliveryTarget('https://ada:pw@hooks.example.com/in?x=1#frag', [])
  t.ok('url' in ok)
  if ('url' in ok) {
    t.equal(ok.url.href, 'https://hooks.example.com/in?x=1')
    t.equal(ok.auth, `Basic ${Buffer.from('ada:pw').toString('base64')}`)
  }
  t.same(deliveryTarget('https://10.0.0.1/in', []), { error: 'refused: 10.0.0.1 is a private address' })
  t.same(deliveryTarget('http://hooks.example.com/in', []), { error: 'refused: webhook URLs must use https' })
  const plain = deliveryTarget('https://hooks.example.com/in', [])
  t.equal('url' in plain && plain.auth, null, 'no credentials: no Authorization')
})

t.test('retry schedule: 5 s, 30 s, 2 min, 10 min, 30 min, 1 h, 3 h, 6 h, 12 h, 24 h, then failed', async t => {
  t.same(RETRY_SCHEDULE_S, [5, 30, 120, 600, 1800, 3600, 10800, 21600, 43200, 86400])
  t.equal(MAX_ATTEMPTS, 11, 'the first attempt plus ten retries')
  t.same([1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map(n => retryDelayMs(n)), RETRY_SCHEDULE_S.map(s => s * 1000))
  t.equal(retryDelayMs(11), null, 'no retry after the eleventh attempt')
  t.equal(retryDelayMs(0), null)
  t.same([1, 2, 10].map(n => retryDelayMs(n, 0.001)), [5, 30, 86400], 'WEBHOOK_RETRY_SCALE shrinks it (24 h -> 86.4 s)')
  t.equal(retryDelayMs(1, 0), 0)
})

t.test('status classification: 2xx delivers, 410 disables, everything else (3xx included) retries', async t => {
  for (const s of [200, 201, 202, 204, 299]) t.equal(classifyStatus(s), 'delivered', `${s}`)
  t.equal(classifyStatus(410), 'gone')
  for (const s of [100, 301, 302, 303, 304, 307, 308, 400, 401, 403, 404, 409, 429, 500, 502, 503, 504]) t.equal(classifyStatus(s), 'retry', `${s}`)
})

t.test('outcome of an attempt', async t => {
  const ok = { statusCode: 200, latencyMs: 12, error: null }
  t.same(outcomeOf(ok, 1, { registered: true }), { status: 'delivered', delayMs: null, disableWebhook: null })
  t.same(outcomeOf({ statusCode: 410, latencyMs: 3, error: 'HTTP 410' }, 2, { registered: true }),
    { status: 'disabled', delayMs: null, disableWebhook: 'receiver answered 410 Gone' }, '410 on a registered webhook disables it')
  t.same(outcomeOf({ statusCode: 410, latencyMs: 3, error: 'HTTP 410' }, 1, { registered: false }),
    { status: 'disabled', delayMs: null, disableWebhook: null }, '410 on a per-job URL disables only that delivery')
  t.same(outcomeOf({ statusCode: 500, latencyMs: 3, error: 'HTTP 500' }, 1, { registered: true }), { status: 'pending', delayMs: 5000, disableWebhook: null })
  t.same(outcomeOf({ statusCode: 302, latencyMs: 3, error: 'redirect' }, 3, { registered: true }), { status: 'pending', delayMs: 120_000, disableWebhook: null }, 'a redirect is a failure')
  t.same(outcomeOf({ statusCode: null, latencyMs: 10000, error: 'timeout' }, 10, { registered: false, scale: 0.5 }), { status: 'pending', delayMs: 43_200_000, disableWebhook: null })
  t.same(outcomeOf({ statusCode: 500, latencyMs: 3, error: 'HTTP 500' }, 11, { registered: true }), { status: 'failed', delayMs: null, disableWebhook: null }, 'the last attempt fails it')
  t.same(outcomeOf({ statusCode: null, latencyMs: null, error: 'refused', permanent: true }, 1, { registered: true }),
    { status: 'failed', delayMs: null, disableWebhook: null }, 'a URL that can never pass fails at once')
})
