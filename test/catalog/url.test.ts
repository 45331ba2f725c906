// URL rules of request fields (src/catalog/url.ts): webhook targets and media inputs as 422
// errors naming the field, and the masked URL shown back. The host rules themselves are tested in
// test/net/address-policy.test.ts.
import t from 'tap'
import { checkMediaUrl, checkWebhookUrl, maskUrlPassword } from '../../src/catalog/url.js'

t.test('checkWebhookUrl names the given param, for POST /webhooks `url`', async t => {
  t.throws(() => checkWebhookUrl('http://example.com/x', {}, 'url'), { code: 'UNSUPPORTED_OPTION', extra: { param: 'url' } })
  t.throws(() => checkWebhookUrl('not a url', {}, 'url'), { code: 'UNSUPPORTED_OPTION', extra: { param: 'url' } })
  t.throws(() => checkWebhookUrl('https://' + 'a'.repeat(2048) + '.com', {}, 'url'), { code: 'UNSUPPORTED_OPTION', extra: { param: 'url' } })
  t.doesNotThrow(() => checkWebhookUrl('https://example.com/x', {}, 'url'))
  t.doesNotThrow(() => checkWebhookUrl('https://user:pw@example.com:8443/x?y=1', {}))
})

t.test('checkWebhookUrl refuses plain http, loopback and non-public literals unless allowlisted', async t => {
  t.throws(() => checkWebhookUrl('http://example.com/x'), { code: 'UNSUPPORTED_OPTION', message: /must use https/, extra: { param: 'webhook_url' } })
  for (const bad of ['https://localhost/x', 'https://127.0.0.1/x', 'https://[::1]/x', 'https://169.254.169.254/x', 'https://0x7f.1/x']) {
    t.throws(() => checkWebhookUrl(bad), { code: 'UNSUPPORTED_OPTION', message: /publicly routable/ }, `${bad} refused`)
  }
  t.doesNotThrow(() => checkWebhookUrl('http://127.0.0.1:9999/x', { webhookAllowlist: ['127.0.0.1:9999'] }), 'allowlisted host:port')
  t.doesNotThrow(() => checkWebhookUrl('https://8.8.8.8/x'), 'a public literal')
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

t.test('maskUrlPassword: the userinfo password becomes ****; everything else is kept as given', async (t) => {
  t.equal(maskUrlPassword('https://ops:s3cr3t@hooks.example.com/in?x=1'), 'https://ops:****@hooks.example.com/in?x=1')
  t.equal(maskUrlPassword('https://ops:p@ss@hooks.example.com/in'), 'https://ops:****@hooks.example.com/in', 'the last @ of the authority ends the userinfo')
  t.equal(maskUrlPassword('https://user@hooks.example.com/'), 'https://user@hooks.example.com/', 'no password')
  t.equal(maskUrlPassword('https://hooks.example.com/a@b:c'), 'https://hooks.example.com/a@b:c', 'an @ in the path is not userinfo')
  t.equal(maskUrlPassword('https://hooks.example.com:8443/x'), 'https://hooks.example.com:8443/x', 'a port is not a password')
  t.equal(maskUrlPassword('https://:only@h.example/'), 'https://:****@h.example/')
  t.equal(maskUrlPassword('not a url'), 'not a url')
})
