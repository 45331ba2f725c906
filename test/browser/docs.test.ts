// GET /v1/docs (docs/api.md "Endpoints"): the interactive reference, served entirely by the service (no
// CDN), rendered from /v1/openapi.json in a real browser (headless Chromium).
import t from 'tap'
import { mkdir, readFile, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { assertError } from '../helpers/assert.js'
import { startServer } from '../helpers/server.js'
import { CHROMIUM, launchChromium } from '../helpers/browser.js'

const s = await startServer(t)
const OUT = join(process.cwd(), 'test-output')

t.test('the page and its assets come from the service with types, caching and gzip', async (t) => {
  const r = await fetch(`${s.url}/v1/docs`, { headers: { accept: 'application/toon' } })
  const html = await r.text()
  t.equal(r.status, 200)
  t.equal(r.headers.get('content-type'), 'text/html; charset=utf-8', 'HTML whatever Accept asks for (not TOON)')
  t.match(r.headers.get('content-security-policy'), /script-src 'self'/)
  t.equal(r.headers.get('cache-control'), 'no-cache')
  t.notMatch(html, /https?:\/\//, 'no absolute URL: nothing from a CDN')
  const etag = r.headers.get('etag')!
  t.equal((await fetch(`${s.url}/v1/docs`, { headers: { 'if-none-match': etag } })).status, 304)

  const urls = [...html.matchAll(/(?:src|href)="(\/v1\/docs\/assets\/[^"]+)"/g)].map(m => m[1])
  t.equal(urls.length, 4, 'bundle, stylesheet, page styles, init script')
  for (const u of urls) {
    t.match(u, /\?v=[A-Za-z0-9_-]{16}$/, `${u}: versioned by content`)
    const a = await fetch(s.url + u)
    const body = Buffer.from(await a.arrayBuffer())
    t.equal(a.status, 200, u)
    t.match(a.headers.get('content-type'), u.includes('.js') ? /^text\/javascript; charset=utf-8$/ : /^text\/css; charset=utf-8$/, `${u}: Content-Type`)
    t.equal(a.headers.get('cache-control'), 'public, max-age=31536000, immutable')
    t.equal(a.headers.get('x-content-type-options'), 'nosniff')
    t.ok(body.length > 0)
    if (u.includes('swagger-ui-bundle.js')) {
      t.ok(body.length > 500_000, 'the whole Swagger UI bundle')
      t.equal(a.headers.get('content-encoding'), 'gzip', 'compressed for clients that accept gzip')
      const again = await fetch(s.url + u, { headers: { 'if-none-match': a.headers.get('etag')!, 'accept-encoding': 'gzip' } })
      t.equal(again.status, 304)
      const plain = await fetch(s.url + u, { headers: { 'accept-encoding': 'identity' } })
      t.equal(plain.headers.get('content-encoding'), null)
      t.equal(Number(plain.headers.get('content-length')), body.length, 'identity: the same bytes')
    }
  }
  assertError(t, await s.req('GET', '/v1/docs/assets/nope.js'), 404, 'NOT_FOUND')
  assertError(t, await s.req('GET', '/v1/docs/assets/..%2Fpackage.json'), 404, 'NOT_FOUND')
})

if (!CHROMIUM) {
  t.test('headless Chromium renders /v1/docs', { skip: 'headless Chromium: /usr/bin/chromium is not installed (apt-get install chromium)' }, () => {})
} else {
  t.test('headless Chromium renders /v1/docs from /v1/openapi.json with no request leaving the service', async (t) => {
    const browser = await launchChromium()
    t.teardown(() => browser.close())
    const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } })
    const offsite: string[] = []
    const problems: string[] = []
    await page.route('**/*', (route) => {
      const url = route.request().url()
      if (url.startsWith(s.url) || url.startsWith('data:')) return route.continue()
      offsite.push(url)
      return route.abort()
    })
    page.on('console', m => { if (m.type() === 'error') problems.push(m.text()) })
    page.on('pageerror', e => problems.push(String(e)))

    const res = await page.goto(`${s.url}/v1/docs`)
    t.equal(res?.status(), 200)
    // Swagger UI fetches /v1/openapi.json and renders one block per operation.
    await page.waitForSelector('.opblock-summary-path[data-path="/generate/video"]', { timeout: 20_000 })
    const paths = await page.$$eval('.opblock-summary-path', els => els.map(e => e.getAttribute('data-path')))
    for (const p of ['/generate/video', '/generate/image', '/generate/audio', '/jobs/{id}', '/assets', '/usage/summary', '/usage/limits']) {
      t.ok(paths.includes(p), `the reference lists ${p}`)
    }
    const text = await page.textContent('body')
    t.match(text, /Generation Job Service API/, 'the title from info')
    t.match(text, /\/generate\/video/)

    // Interactive: opening the operation shows its request body, with a model id from the enum.
    await page.click('.opblock-summary-path[data-path="/generate/video"]')
    await page.waitForSelector('.opblock.is-open .opblock-section-request-body', { timeout: 10_000 })
    const open = await page.textContent('.opblock.is-open')
    t.match(open, /veo3-fast/, 'the example request body uses a catalogue model id')
    await page.evaluate(() => window.scrollTo(0, 0))

    await mkdir(OUT, { recursive: true })
    const file = join(OUT, 'docs.png')
    await page.screenshot({ path: file })
    const png = await readFile(file)
    t.ok((await stat(file)).size > 30_000, `screenshot ${file} is ${png.length} bytes`)
    t.same([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'a PNG')
    t.equal(png.readUInt32BE(16), 1280, 'width')
    t.equal(png.readUInt32BE(20), 1400, 'height')

    t.same(offsite, [], 'no request left the service (no CDN, fonts or validator badge)')
    t.same(problems, [], 'no console errors (CSP violations included)')
  })
}
