// The address policy on URLs and hosts, before any DNS (src/net/address-policy.ts): how a host
// looks to an HTTP client, the allowlist, and the verdict on a target URL with its message.
import t from 'tap'
import { checkDestination, classifyHost, isAllowlistedHost, targetVerdict } from '../../src/net/address-policy.js'

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

t.test('targetVerdict: allowlisted, checked, or why not', async t => {
  const v = (u: string, allow: string[] = []) => targetVerdict(new URL(u), allow)
  t.equal(v('https://hooks.example.com/x'), 'checked', 'a name is checked (resolved later)')
  t.equal(v('https://8.8.8.8/x'), 'checked')
  t.equal(v('http://127.0.0.1:9999/x', ['127.0.0.1:9999']), 'allowlisted')
  t.equal(v('http://example.com/x'), 'not-https')
  t.equal(v('ftp://example.com/x'), 'scheme')
  t.equal(v('https://api.localhost/x'), 'localhost')
  t.equal(v('https://[fe80::1]/x'), 'non-public-ip')
})
