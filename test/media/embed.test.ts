// The embed page (src/media/embed.ts): escaping and URL rules, then the page in headless
// Chromium served by a tiny local server with an MP4 (the sample, and one made by makeVideo)
// and a poster made by thumbnail(): the video loads its metadata and the poster loads.
import { mkdir, readFile } from 'node:fs/promises'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { EMBED_HEADERS, escapeHtml, renderEmbedPage } from '../../src/media/embed.js'
import { makeVideo, thumbnail } from '../../src/media/ffmpeg.js'
import { CHROMIUM, launchChromium } from '../helpers/browser.js'

const SAMPLE_MP4 = new URL('../../../assets/sim/sample.mp4', import.meta.url).pathname
const OUT = join(process.cwd(), 'test-output')

t.test('attributes are escaped; only absolute http(s) URLs are used; no script and no external resource; the title is a fixed "Video"', async (t) => {
  const html = renderEmbedPage({
    videoUrl: 'https://cdn.example/v.mp4?a=1&b="x"',
    posterUrl: 'https://cdn.example/p.jpg?q=<b>',
    width: 720,
    height: 1280,
  })
  t.notMatch(html, /<script/i, 'no script element')
  t.match(html, /<title>Video<\/title>/, 'the page has nothing of the owner\'s (the prompt is not an input)')
  t.match(html, /aria-label="Video"/)
  t.match(html, / src="https:\/\/cdn\.example\/v\.mp4\?a=1&amp;b=%22x%22"/, 'the URL normalized and escaped')
  t.match(html, / poster="https:\/\/cdn\.example\/p\.jpg\?q=%3Cb%3E"/)
  t.match(html, /<video controls playsinline preload="metadata"/)
  t.match(html, /aspect-ratio:720\/1280/)
  t.notMatch(html, /rel="stylesheet"|@import|url\(/, 'no stylesheet, import or CSS url()')
  t.match(html, /<link rel="icon" href="data:,">/, 'an empty icon: the browser asks for no /favicon.ico')
  t.equal(html.match(/https?:\/\//g)!.length, 3, 'the only URLs are the video (twice: src and fallback link) and the poster')
  t.throws(() => renderEmbedPage({ videoUrl: 'javascript:alert(1)', posterUrl: null }), TypeError)
  t.throws(() => renderEmbedPage({ videoUrl: '/relative.mp4', posterUrl: null }), TypeError)
  t.notMatch(renderEmbedPage({ videoUrl: 'https://x/v.mp4', posterUrl: 'javascript:alert(1)' }), /poster=/, 'a poster that is not http(s) is dropped')
  t.notMatch(renderEmbedPage({ videoUrl: 'https://x/v.mp4', posterUrl: null }), /poster=/)
  t.match(renderEmbedPage({ videoUrl: 'https://x/v.mp4', posterUrl: null, width: -3, height: 0 }), /aspect-ratio:16\/9/, 'bad sizes: 16/9')
  t.equal(escapeHtml(`<>&"'\``), '&lt;&gt;&amp;&quot;&#39;&#96;')
  t.match(EMBED_HEADERS['content-security-policy'], /default-src 'none'/)
  t.notMatch(EMBED_HEADERS['content-security-policy'], /script-src/, 'no script allowed')
})

/** Serves /embed/<name> pages and /media/<file> with Range support (as a browser asks for video). */
async function mediaServer (files: Record<string, { type: string; bytes: Buffer }>) {
  const hits: Array<{ path: string; status: number }> = []
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname
    const f = files[path]
    if (!f) { hits.push({ path, status: 404 }); res.writeHead(404).end(); return }
    const headers: Record<string, string | number> = { 'content-type': f.type, 'accept-ranges': 'bytes' }
    if (f.type.startsWith('text/html')) Object.assign(headers, EMBED_HEADERS)
    const range = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range ?? '')
    if (range) {
      const start = range[1] === '' ? f.bytes.length - Number(range[2]) : Number(range[1])
      const end = range[1] !== '' && range[2] !== '' ? Math.min(Number(range[2]), f.bytes.length - 1) : f.bytes.length - 1
      hits.push({ path, status: 206 })
      res.writeHead(206, { ...headers, 'content-range': `bytes ${start}-${end}/${f.bytes.length}`, 'content-length': end - start + 1 })
      res.end(f.bytes.subarray(start, end + 1))
      return
    }
    hits.push({ path, status: 200 })
    res.writeHead(200, { ...headers, 'content-length': f.bytes.length })
    res.end(f.bytes)
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, hits, close: () => new Promise<void>(resolve => { server.closeAllConnections(); server.close(() => resolve()) }) }
}

if (!CHROMIUM) {
  t.test('the embed page plays in headless Chromium', { skip: 'headless Chromium: /usr/bin/chromium is not installed (apt-get install chromium)' }, () => {})
} else {
  t.test('in headless Chromium the video loads its metadata and the poster loads, with nothing fetched elsewhere', async (t) => {
    const sample = await readFile(SAMPLE_MP4)
    const made = await makeVideo({ width: 640, height: 360, seconds: 2 })
    const poster = await thumbnail(sample)
    const madePoster = await thumbnail(made)
    const files: Record<string, { type: string; bytes: Buffer }> = {
      '/media/sample.mp4': { type: 'video/mp4', bytes: sample },
      '/media/made.mp4': { type: 'video/mp4', bytes: made },
      '/media/sample.jpg': { type: 'image/jpeg', bytes: poster },
      '/media/made.jpg': { type: 'image/jpeg', bytes: madePoster },
    }
    const srv = await mediaServer(files)
    t.teardown(srv.close)
    files['/embed/sample'] = { type: 'text/html; charset=utf-8', bytes: Buffer.from(renderEmbedPage({ videoUrl: `${srv.url}/media/sample.mp4`, posterUrl: `${srv.url}/media/sample.jpg` })) }
    files['/embed/made'] = { type: 'text/html; charset=utf-8', bytes: Buffer.from(renderEmbedPage({ videoUrl: `${srv.url}/media/made.mp4`, posterUrl: `${srv.url}/media/made.jpg`, width: 640, height: 360 })) }

    const browser = await launchChromium()
    t.teardown(() => browser.close())
    for (const name of ['sample', 'made']) {
      const page = await browser.newPage({ viewport: { width: 640, height: 360 } })
      const offsite: string[] = []
      const problems: string[] = []
      page.on('request', r => { if (!r.url().startsWith(srv.url)) offsite.push(r.url()) })
      page.on('console', m => { if (m.type() === 'error') problems.push(m.text()) })
      page.on('pageerror', e => problems.push(e.message))
      const res = await page.goto(`${srv.url}/embed/${name}`)
      t.equal(res?.status(), 200)
      await page.waitForFunction(() => (document.querySelector('video') as HTMLVideoElement).readyState >= 1, undefined, { timeout: 15_000 })
      const v = await page.evaluate(async () => {
        const video = document.querySelector('video') as HTMLVideoElement
        const img = new Image()
        img.src = video.poster
        await img.decode()
        return {
          readyState: video.readyState, duration: video.duration, width: video.videoWidth, height: video.videoHeight,
          error: video.error?.message ?? null, poster: video.poster, posterWidth: img.naturalWidth, controls: video.controls,
          playsInline: video.playsInline
        }
      })
      t.ok(v.readyState >= 1, `${name}: readyState ${v.readyState}`)
      t.ok(v.duration > 0, `${name}: duration ${v.duration} s`)
      t.equal(v.error, null)
      t.ok(v.posterWidth > 0, `${name}: the poster image loads (${v.posterWidth} px wide)`)
      t.ok(v.controls && v.playsInline)
      if (name === 'made') {
        t.equal(v.width, 640)
        t.equal(v.height, 360)
        t.ok(Math.abs(v.duration - 2) <= 0.1, 'makeVideo\'s length as the browser reads it')
      }
      t.ok(srv.hits.some(h => h.path === `/media/${name}.jpg` && h.status === 200), 'the poster was fetched by the page')
      t.ok(srv.hits.some(h => h.path === `/media/${name}.mp4` && (h.status === 200 || h.status === 206)), 'the video was fetched')
      t.same(offsite, [], 'no request leaves the local server')
      t.same(problems, [], 'no console error (CSP violations included)')
      t.notOk(srv.hits.some(h => h.status === 404), 'nothing missing (no favicon request either)')
      await mkdir(OUT, { recursive: true })
      await page.screenshot({ path: join(OUT, `embed-${name}.png`) })
      await page.close()
    }
  })
}
