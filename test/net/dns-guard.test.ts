// The address policy where names become sockets (src/net/dns-guard.ts): the guarded lookup, the
// registration-time resolution, the check of the connected address, and the undici connector that
// refuses a name resolving to a private address (DNS rebinding). DNS is injected; no network.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { Agent, request } from 'undici'
import { RefusedDestination } from '../../src/net/address-policy.js'
import { connectedAddressError, guardedConnector, guardedLookup, resolveForRegistration, type LookupAll } from '../../src/net/dns-guard.js'

t.test('connectedAddressError: the socket must be connected to a public address', async t => {
  t.equal(connectedAddressError({ remoteAddress: '8.8.8.8' }, 'hook.example'), null, 'a socket connected to a public address passes')
  t.match(connectedAddressError({ remoteAddress: '10.0.0.7' }, 'hook.example'), /hook\.example resolves to 10\.0\.0\.7, a private address/)
  t.match(connectedAddressError({}, 'hook.example'), /could not read/)
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
  const loopbackName = await attempt(`https://localhost:${port}/hook`, guarded)
  t.match((loopbackName as Error).message, /refused: localhost is a loopback name/, 'a loopback name is refused before any lookup')
  t.equal(connections, 0, 'no TCP connection was ever opened to the private address')

  const allowed = new Agent({ connect: guardedConnector({ allowlist: [`127.0.0.1:${port}`], timeoutMs: 2000 }) })
  t.teardown(() => allowed.destroy())
  t.equal(await attempt(`http://127.0.0.1:${port}/hook`, allowed), 200, 'WEBHOOK_ALLOWLIST host:port connects over plain http')
  t.equal(connections, 1)
})
