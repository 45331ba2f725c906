// Host classification and URL policy (docs/api.md "Webhooks", webhook SSRF rules).
import t from 'tap'
import {
  checkMediaUrl, checkWebhookUrl, classifyHost, isAllowlistedHost, isIpLiteral, isPublicIpLiteral,
  parseIPv4, parseIPv6,
} from '../../src/catalog/url.js'

t.test('parseIPv4 takes strict dotted quads only', async t => {
  t.equal(parseIPv4('0.0.0.0'), 0)
  t.equal(parseIPv4('255.255.255.255'), 4294967295)
  t.equal(parseIPv4('10.1.2.3'), 167838211)
  for (const bad of ['1.2.3', '1.2.3.4.5', '256.1.1.1', '01.2.3.4', '1.2.3.-4', 'a.b.c.d', '', '1..2.3']) t.equal(parseIPv4(bad), null, `${bad} is not an address`)
})

t.test('parseIPv6 reads compressed, bracketed, zoned and IPv4-tailed forms', async t => {
  t.same(parseIPv6('::'), new Array(16).fill(0))
  t.same(parseIPv6('::1'), [...new Array(15).fill(0), 1])
  t.same(parseIPv6('[::1]'), [...new Array(15).fill(0), 1])
  t.same(parseIPv6('fe80::1%eth0')?.slice(0, 2), [0xfe, 0x80])
  t.same(parseIPv6('::ffff:1.2.3.4')?.slice(10), [0xff, 0xff, 1, 2, 3, 4])
  t.same(parseIPv6('1:2:3:4:5:6:7:8')?.slice(14), [0, 8])
  for (const bad of ['1:2:3:4:5:6:7:8:9', '1::2::3', 'g::1', '::ffff:1.2.3.256', '1:2:3:4:5:6:7', '12345::', '1.2.3.4', 'example.com']) {
    t.equal(parseIPv6(bad), null, `${bad} is not an IPv6 address`)
  }
})

t.test('isPublicIpLiteral: public unicast only', async t => {
  for (const ip of [
    '8.8.8.8', '1.1.1.1', '93.184.216.34', '172.15.255.255', '172.32.0.0', '100.63.255.255', '100.128.0.0',
    '169.253.255.255', '192.167.255.255', '223.255.255.255',
    '2606:4700:4700::1111', '[2001:4860:4860::8888]', '::ffff:8.8.8.8', '64:ff9b::808:808', '2002:808:808::1',
  ]) t.ok(isPublicIpLiteral(ip), `${ip} is public`)
  for (const ip of [
    '0.0.0.0', '0.1.2.3', '10.0.0.1', '10.255.255.255', '100.64.0.0', '100.127.255.255', '127.0.0.1', '127.255.0.1',
    '169.254.0.1', '169.254.169.254', '172.16.0.0', '172.31.255.255', '192.168.0.1', '192.0.0.8', '192.0.2.1',
    '198.18.0.1', '198.19.255.255', '198.51.100.1', '203.0.113.1', '224.0.0.1', '239.255.255.250', '240.0.0.1', '255.255.255.255',
    '::', '::1', '[::1]', 'fc00::1', 'fd12:3456::1', 'fe80::1', 'fe80::1%eth0', 'febf::1', 'ff02::1', '::ffff:127.0.0.1',
    '::ffff:10.0.0.1', '::ffff:169.254.169.254', '::ffff:7f00:1', '64:ff9b::a00:1', '2002:a00:1::1', '2001:db8::1', '2001::1', '::127.0.0.1',
  ]) t.notOk(isPublicIpLiteral(ip), `${ip} is not public`)
  t.notOk(isPublicIpLiteral('example.com'), 'a name is not a public IP literal')
  t.notOk(isPublicIpLiteral(''), 'nothing is not a public IP literal')
  t.ok(isIpLiteral('::1') && isIpLiteral('1.2.3.4') && !isIpLiteral('localhost'))
})

t.test('classifyHost sees hosts as an HTTP client would connect to them', async t => {
  const cases: Array<[string, string]> = [
    ['localhost', 'localhost'], ['LOCALHOST', 'localhost'], ['localhost.', 'localhost'], ['api.localhost', 'localhost'],
    ['ip6-localhost', 'localhost'],
    ['127.0.0.1', 'non-public-ip'], ['0x7f.1', 'non-public-ip'], ['2130706433', 'non-public-ip'], ['0177.0.0.1', 'non-public-ip'],
    ['127.0.0.1.', 'non-public-ip'], ['[::1]', 'non-public-ip'], ['::1', 'non-public-ip'], ['[::ffff:127.0.0.1]', 'non-public-ip'],
    ['169.254.169.254', 'non-public-ip'], ['10.0.0.1', 'non-public-ip'],
    ['8.8.8.8', 'public-ip'], ['[2606:4700::1]', 'public-ip'],
    ['example.com', 'name'], ['Example.COM', 'name'], ['metadata.example', 'name'],
    ['a b', 'invalid'], ['', 'invalid'], ['exa[mple.com', 'invalid'],
  ]
  for (const [host, cls] of cases) t.equal(classifyHost(host), cls, `${JSON.stringify(host)} is ${cls}`)
})

t.test('checkWebhookUrl names the given param, for POST /webhooks `url`', async t => {
  t.throws(() => checkWebhookUrl('http://example.com/x', {}, 'url'), { code: 'UNSUPPORTED_OPTION', extra: { param: 'url' } })
  t.throws(() => checkWebhookUrl('not a url', {}, 'url'), { code: 'UNSUPPORTED_OPTION', extra: { param: 'url' } })
  t.throws(() => checkWebhookUrl('https://' + 'a'.repeat(2048) + '.com', {}, 'url'), { code: 'UNSUPPORTED_OPTION', extra: { param: 'url' } })
  t.doesNotThrow(() => checkWebhookUrl('https://example.com/x', {}, 'url'))
  t.doesNotThrow(() => checkWebhookUrl('https://user:pw@example.com:8443/x?y=1', {}))
})

t.test('checkMediaUrl accepts public http(s) and refuses local targets', async t => {
  t.doesNotThrow(() => checkMediaUrl('https://cdn.example.com/a.png', 'image_url'))
  t.doesNotThrow(() => checkMediaUrl('http://8.8.8.8/a.png', 'image_url'))
  for (const bad of ['http://localhost/a.png', 'https://[::1]/a', 'http://10.0.0.1/a', 'file:///etc/passwd', 'data:image/png;base64,AAAA', 'javascript:alert(1)']) {
    t.throws(() => checkMediaUrl(bad, 'image_url'), { code: 'UNSUPPORTED_OPTION', extra: { param: 'image_url' } }, `${bad} refused`)
  }
  t.doesNotThrow(() => checkMediaUrl('http://localhost:8080/files/a.png', 'image_url', { publicBaseUrl: 'http://localhost:8080' }))
  t.doesNotThrow(() => checkMediaUrl('http://localhost:8080/files/a.png', 'image_url', { publicBaseUrl: 'http://localhost:8080/' }))
})

t.test('isAllowlistedHost matches host or host:port with the default port filled in', async t => {
  const u = (s: string) => new URL(s)
  t.ok(isAllowlistedHost(u('http://localhost:9999/x'), ['localhost:9999']))
  t.ok(isAllowlistedHost(u('http://LOCALHOST:9999/x'), ['localhost:9999']))
  t.ok(isAllowlistedHost(u('http://localhost/x'), ['localhost:80']))
  t.ok(isAllowlistedHost(u('http://localhost:1/x'), ['localhost']))
  t.ok(isAllowlistedHost(u('http://[::1]:8080/x'), ['[::1]:8080']))
  t.notOk(isAllowlistedHost(u('http://localhost:9998/x'), ['localhost:9999']))
  t.notOk(isAllowlistedHost(u('http://evil-localhost/x'), ['localhost']))
  t.notOk(isAllowlistedHost(u('http://localhost/x'), []))
  t.notOk(isAllowlistedHost(u('http://localhost/x'), undefined))
})

t.test('maskUrlPassword: the userinfo password becomes ****; everything else is kept as given', async (t) => {
  const { maskUrlPassword } = await import('../../src/catalog/url.js')
  t.equal(maskUrlPassword('https://ops:s3cr3t@hooks.example.com/in?x=1'), 'https://ops:****@hooks.example.com/in?x=1')
  t.equal(maskUrlPassword('https://ops:p@ss@hooks.example.com/in'), 'https://ops:****@hooks.example.com/in', 'the last @ of the authority ends the userinfo')
  t.equal(maskUrlPassword('https://user@hooks.example.com/'), 'https://user@hooks.example.com/', 'no password')
  t.equal(maskUrlPassword('https://hooks.example.com/a@b:c'), 'https://hooks.example.com/a@b:c', 'an @ in the path is not userinfo')
  t.equal(maskUrlPassword('https://hooks.example.com:8443/x'), 'https://hooks.example.com:8443/x', 'a port is not a password')
  t.equal(maskUrlPassword('https://:only@h.example/'), 'https://:****@h.example/')
  t.equal(maskUrlPassword('not a url'), 'not a url')
})
