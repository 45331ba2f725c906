// Library media through the real service (docs/api.md "Jobs", Library): the simulated
// provider's media follow the request (aspect ratio -> dimensions, duration -> length); a
// library video gets a real thumbnail (a frame, JPEG) and an embed page that plays in headless
// Chromium with the thumbnail as its poster.
import { mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { UNLIMITED_TIERS, paidUser, pollJob } from '../helpers/jobs.js'
import { CHROMIUM, launchChromium } from '../helpers/browser.js'
import { startServer } from '../helpers/server.js'
import { freePort } from '../helpers/net.js'

const port = await freePort()
const base = `http://127.0.0.1:${port}`
const s = await startServer(t, { PORT: String(port), PUBLIC_BASE_URL: base, SIM_SPEED: '200', SHARDS: '1', TIER_LIMITS: UNLIMITED_TIERS })
const u = await paidUser(s, 100_000)

const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'seedance-2', prompt: 'a tall lighthouse', aspect_ratio: '9:16', duration: '6' } })
const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 20_000 })

t.test('the library video has a JPEG thumbnail and an embed_url under PUBLIC_BASE_URL', async (t) => {
  t.equal(r.status, 201, r.text)
  t.equal(job.status, 'completed')
  const lib = await s.req('GET', '/v1/videos', { key: u.key })
  const v = lib.body.data.find((x: any) => x.prompt === 'a tall lighthouse')
  t.ok(v, 'in the library')
  t.equal(v.video_url, job.result_url)
  const token = v.embed_url.slice(`${base}/embed/`.length)
  t.ok(v.embed_url.startsWith(`${base}/embed/`), `embed_url ${v.embed_url}`)
  t.match(token, /^[A-Za-z0-9_-]{32}$/, 'a random base64url token of 24 bytes (192 bits), not the video id')
  t.not(token, String(v.id))
  t.ok(v.thumbnail_url?.startsWith(`${base}/files/thumbs/`), `thumbnail_url ${v.thumbnail_url}`)
  const th = await fetch(v.thumbnail_url)
  t.equal(th.status, 200)
  t.equal(th.headers.get('content-type'), 'image/jpeg')
  const bytes = Buffer.from(await th.arrayBuffer())
  t.same([...bytes.subarray(0, 3)], [0xff, 0xd8, 0xff], 'JPEG magic')
  const page = await fetch(v.embed_url)
  t.equal(page.status, 200)
  t.match(page.headers.get('content-type'), /^text\/html/)
  t.match(page.headers.get('content-security-policy'), /default-src 'none'/)
  const html = await page.text()
  t.match(html, `src="${job.result_url}"`)
  t.match(html, `poster="${v.thumbnail_url}"`)
  t.notMatch(html, /lighthouse/i, 'the page shows no prompt (public page)')
  t.match(html, /<title>Video<\/title>/)
  t.equal((await fetch(`${base}/embed/${v.id}`)).status, 404, 'the old address, /embed/{video id}, is 404: pages cannot be walked')
  t.equal((await fetch(`${base}/embed/999999`)).status, 404, 'unknown video: 404')
  t.equal((await fetch(`${base}/embed/abc`)).status, 404)
  t.equal((await fetch(`${base}/embed/${token.slice(0, -1)}${token.endsWith('A') ? 'B' : 'A'}`)).status, 404, 'a token one character off: 404')
})

t.test('each library video gets its own token; a page is found by its token only', async (t) => {
  const r2 = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'seedance-2', prompt: 'a second secret prompt', duration: '6' } })
  t.equal(r2.status, 201, r2.text)
  await pollJob(s, u, r2.body.id, { timeoutMs: 20_000 })
  const lib = await s.req('GET', '/v1/videos', { key: u.key })
  const urls = lib.body.data.map((x: any) => x.embed_url)
  t.equal(new Set(urls).size, urls.length, `distinct embed URLs: ${urls.join(', ')}`)
  const second = lib.body.data.find((x: any) => x.prompt === 'a second secret prompt')
  const html = await (await fetch(second.embed_url)).text()
  t.match(html, `src="${second.video_url}"`, 'the token leads to its own video')
  t.notMatch(html, /secret prompt/)
})

t.test('simulated images follow the aspect ratio and format', async (t) => {
  const ri = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'wide', aspect_ratio: '16:9', output_format: 'png' } })
  const ji = (await pollJob(s, u, ri.body.id, { timeoutMs: 20_000 })).job
  const png = Buffer.from(await (await fetch(ji.result_url)).arrayBuffer())
  t.equal(png.subarray(1, 4).toString('latin1'), 'PNG')
  t.same([png.readUInt32BE(16), png.readUInt32BE(20)], [640, 360], 'IHDR width x height follow 16:9')
})

if (!CHROMIUM) {
  t.test('embed page in Chromium', { skip: 'headless Chromium: /usr/bin/chromium is not installed' }, () => {})
} else {
  t.test('in headless Chromium the embed page plays our copy at the requested size and length; the poster is the thumbnail', async (t) => {
    const lib = await s.req('GET', '/v1/videos', { key: u.key })
    const v = lib.body.data.find((x: any) => x.prompt === 'a tall lighthouse')
    const browser = await launchChromium()
    t.teardown(() => browser.close())
    const page = await browser.newPage({ viewport: { width: 360, height: 640 } })
    const problems: string[] = []
    page.on('console', m => { if (m.type() === 'error') problems.push(m.text()) })
    page.on('pageerror', e => problems.push(e.message))
    const res = await page.goto(v.embed_url)
    t.equal(res?.status(), 200)
    await page.waitForFunction(() => (document.querySelector('video') as HTMLVideoElement).readyState >= 1, undefined, { timeout: 15_000 })
    const m = await page.evaluate(async () => {
      const video = document.querySelector('video') as HTMLVideoElement
      const img = new Image()
      img.src = video.poster
      await img.decode()
      return {
        duration: video.duration, width: video.videoWidth, height: video.videoHeight, poster: video.poster, posterWidth: img.naturalWidth,
        posterHeight: img.naturalHeight
      }
    })
    t.same([m.width, m.height], [360, 640], 'dimensions follow aspect_ratio 9:16')
    t.ok(Math.abs(m.duration - 6) <= 0.2, `length follows duration 6 (${m.duration} s)`)
    t.equal(m.poster, v.thumbnail_url)
    t.ok(m.posterWidth > 0 && m.posterHeight > m.posterWidth, `the poster (a frame) loads, portrait ${m.posterWidth}x${m.posterHeight}`)
    t.same(problems, [], 'no console error')
    await mkdir(join(process.cwd(), 'test-output'), { recursive: true })
    await page.screenshot({ path: join(process.cwd(), 'test-output', 'providers-embed.png') })
  })
}
