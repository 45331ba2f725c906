// IP literals (src/net/ip.ts): strict parsers, the public/non-public verdict and the name of
// each non-public kind, all from one table of special-purpose ranges.
import t from 'tap'
import { addressKind, isIpLiteral, isPublicIpLiteral, parseIPv4, parseIPv6 } from '../../src/net/ip.js'

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
})
