// Webhook delivery rules without a database: signing (docs/api.md "Webhooks"), the retry schedule and
// answer classification (docs/api.md "Endpoints"), and the SSRF address rules, including the undici
// connector that refuses a name resolving to a private address (DNS rebinding).
import { createHmac } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { Agent, request } from 'undici'
import {
  addressKind, basicAuthOf, checkDestination, classifyStatus, connectedAddressError, deliveryHeaders, guardedConnector, guardedLookup,
  MAX_ATTEMPTS, outcomeOf, RefusedDestination, resolveForRegistration, RETRY_SCHEDULE_S, retryDelayMs, signatureHeader,
  type LookupAll,
} from '../../src/webhooks/delivery.js'
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

t.test('credentials in the URL become Authorization: Basic and leave the URL', async t => {
  const u = new URL('https://ada:s%3Acret@hooks.example.com/x')
  t.equal(basicAuthOf(u), `Basic ${Buffer.from('ada:s:cret').toString('base64')}`)
  t.equal(u.href, 'https://hooks.example.com/x')
  t.equal(basicAuthOf(new URL('https://hooks.example.com/x')), null)
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

t.test('address classification: every non-public kind is named; the verdict is isPublicIpLiteral', async t => {
  const cases: Array<[string, string]> = [
    ['127.0.0.1', 'loopback'], ['127.255.0.9', 'loopback'], ['::1', 'loopback'], ['::ffff:127.0.0.1', 'loopback'],
    ['10.0.0.1', 'private'], ['172.16.5.4', 'private'], ['172.31.255.255', 'private'], ['192.168.1.1', 'private'], ['::ffff:10.1.2.3', 'private'],
    ['169.254.169.254', 'metadata'], ['fd00:ec2::254', 'metadata'],
    ['169.254.1.1', 'link-local'], ['fe80::1', 'link-local'],
    ['100.64.0.1', 'cgnat'], ['100.127.255.255', 'cgnat'],
    ['fc00::1', 'unique-local'], ['fd12:3456::1', 'unique-local'],
    ['224.0.0.1', 'multicast'], ['239.1.2.3', 'multicast'], ['ff02::1', 'multicast'],
    ['0.0.0.0', 'unspecified'], ['::', 'unspecified'],
    ['192.0.2.1', 'reserved'], ['255.255.255.255', 'reserved'], ['2001:db8::1', 'reserved'],
    ['8.8.8.8', 'public'], ['93.184.216.34', 'public'], ['2606:4700:4700::1111', 'public'], ['::ffff:8.8.8.8', 'public'],
    ['example.com', 'invalid'], ['', 'invalid'],
  ]
  for (const [ip, kind] of cases) t.equal(addressKind(ip), kind, `${ip} is ${kind}`)
  t.equal(connectedAddressError({ remoteAddress: '8.8.8.8' }, 'hook.example'), null, 'a socket connected to a public address passes')
  t.match(connectedAddressError({ remoteAddress: '10.0.0.7' }, 'hook.example'), /hook\.example resolves to 10\.0\.0\.7, a private address/)
  t.match(connectedAddressError({}, 'hook.example'), /could not read/)
})

t.test('checkDestination: https only, no localhost or non-public literal, unless allowlisted', async t => {
  const refused = (u: string, allow: string[] = []) => {
    const r = checkDestination(u, allow)
    return 'error' in r ? r.error : null
  }
  t.match(refused('http://example.com/hook'), /must use https/)
  t.match(refused('https://127.0.0.1/hook'), /127\.0\.0\.1 is a loopback address/)
  t.match(refused('https://10.0.0.1/hook'), /private/)
  t.match(refused('https://169.254.169.254/latest/meta-data'), /metadata/)
  t.match(refused('https://[::1]:8443/'), /loopback/)
  t.match(refused('https://[fd00:ec2::254]/'), /metadata/)
  t.match(refused('https://0x7f.1/'), /loopback/, 'non-canonical IPv4 forms are canonicalised first')
  t.match(refused('https://localhost/'), /loopback name/)
  t.match(refused('ftp://example.com/'), /ftp/)
  t.match(refused('not a url'), /not a valid URL/)
  t.equal(refused('https://hooks.example.com/x'), null)
  t.equal(refused('https://8.8.8.8/x'), null)
  const ok = checkDestination('http://127.0.0.1:9999/x', ['127.0.0.1:9999'])
  t.ok('url' in ok && ok.allowlisted, 'an allowlisted host:port may be plain http and private')
  t.match(refused('http://127.0.0.1:9998/x', ['127.0.0.1:9999']), /https/, 'another port of the same host is not allowlisted')
})

const fixed = (map: Record<string, string[]>): LookupAll => async (host) => {
  const a = map[host]
  if (!a) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' })
  return a.map(address => ({ address, family: address.includes(':') ? 6 : 4 }))
}

function lookupOnce (fn: ReturnType<typeof guardedLookup>, host: string, all: boolean, family = 0): Promise<{
  err: NodeJS.ErrnoException | null; address: unknown; family?: number
}> {
  return new Promise(resolve => fn(host, { all, family }, (err, address, fam) => resolve({ err, address, family: fam })))
}

t.test('guardedLookup refuses a name when ANY resolved address is non-public', async t => {
  const lookup = guardedLookup(fixed({
    'rebind.test': ['127.0.0.1'],
    'mixed.test': ['93.184.216.34', '10.0.0.5'],
    'meta.test': ['169.254.169.254'],
    'v6.test': ['::1'],
    'public.test': ['93.184.216.34', '2606:4700:4700::1111'],
  }))
  for (const host of ['rebind.test', 'mixed.test', 'meta.test', 'v6.test']) {
    const r = await lookupOnce(lookup, host, true)
    t.type(r.err, RefusedDestination, `${host} refused`)
    t.match(r.err?.message, new RegExp(`^refused: ${host.replace('.', '\\.')} resolves to`))
  }
  const all = await lookupOnce(lookup, 'public.test', true)
  t.equal(all.err, null)
  t.same(all.address, [{ address: '93.184.216.34', family: 4 }, { address: '2606:4700:4700::1111', family: 6 }], 'all: true gets every address')
  const one = await lookupOnce(lookup, 'public.test', false, 6)
  t.same([one.address, one.family], ['2606:4700:4700::1111', 6], 'family filter, single answer')
  const missing = await lookupOnce(lookup, 'nx.test', false)
  t.equal(missing.err?.code, 'ENOTFOUND')
})

t.test('registration-time resolution: non-public, public, unresolved (accepted) or timeout', async t => {
  const l = fixed({ 'loop.test': ['127.0.0.1'], 'pub.test': ['93.184.216.34'], 'half.test': ['93.184.216.34', '192.168.0.2'] })
  t.equal(await resolveForRegistration('loop.test', l), 'non-public')
  t.equal(await resolveForRegistration('half.test', l), 'non-public')
  t.equal(await resolveForRegistration('pub.test', l), 'public')
  t.equal(await resolveForRegistration('nx.test', l), 'unresolved')
  t.equal(await resolveForRegistration('slow.test', () => new Promise(() => {}), 50), 'timeout', 'a resolver that does not answer is not "unresolved" (never accepted on a slow answer)')
})

t.test('the guarded undici connector: rebinding names and private literals never get a connection; allowlisted hosts do', async t => {
  let connections = 0
  const server = createServer((_req, res) => res.end('ok'))
  server.on('connection', () => { connections++ })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  t.teardown(() => new Promise<void>(resolve => server.close(() => resolve())))

  // rebind.test "was public at registration" and now answers 127.0.0.1.
  const guarded = new Agent({ connect: guardedConnector({ allowlist: [], lookupAll: fixed({ 'rebind.test': ['127.0.0.1'] }), timeoutMs: 2000 }) })
  t.teardown(() => guarded.destroy())
  const attempt = async (url: string, agent: Agent) => {
    try {
      const r = await request(url, { method: 'POST', body: '{}', dispatcher: agent })
      await r.body.text()
      return r.statusCode
    } catch (e) { return e as Error }
  }
  const viaName = await attempt(`https://rebind.test:${port}/hook`, guarded)
  t.type(viaName, Error)
  t.match((viaName as Error).message, /refused: rebind\.test resolves to 127\.0\.0\.1, a loopback address/)
  const viaLiteral = await attempt(`https://127.0.0.1:${port}/hook`, guarded)
  t.match((viaLiteral as Error).message, /refused: 127\.0\.0\.1 is a loopback address/)
  const plainHttp = await attempt(`http://rebind.test:${port}/hook`, guarded)
  t.match((plainHttp as Error).message, /must use https/)
  t.equal(connections, 0, 'no TCP connection was ever opened to the private address')

  const allowed = new Agent({ connect: guardedConnector({ allowlist: [`127.0.0.1:${port}`], timeoutMs: 2000 }) })
  t.teardown(() => allowed.destroy())
  t.equal(await attempt(`http://127.0.0.1:${port}/hook`, allowed), 200, 'WEBHOOK_ALLOWLIST host:port connects over plain http')
  t.equal(connections, 1)
})
