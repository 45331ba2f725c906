// The developer dashboard driven by headless Chromium through playwright-core, as a
// person would use it: sign up, operator verifies, key created (secret shown once), a video job
// created from the form (price shown first, from the API's own pricing rules), watched live to
// completed over SSE, played, its charge found in the ledger and the chart, the key revoked.
// Screenshots of every page go to test-output/dashboard/.
import { mkdir } from 'node:fs/promises'
import { createServer } from 'node:net'
import t from 'tap'
import { priceAudio, priceVideo } from '../../src/catalog/pricing.js'
import { CHROMIUM, launchChromium } from '../helpers/browser.js'
import { ADMIN_TOKEN, startServer } from '../helpers/server.js'

/** The form's price once it shows `want` (a re-render may land a frame after the select), else what it shows after 5 s. */
async function priceShown (page: import('playwright-core').Page, want: string): Promise<string> {
  const price = page.getByTestId('price')
  await price.filter({ hasText: new RegExp(`^${want}$`) }).waitFor({ timeout: 5000 }).catch(() => {})
  return price.innerText()
}
import { startReceiver } from '../fixtures/webhook-receiver.js'
import { settled } from '../helpers/wait.js'

const OUT = 'test-output/dashboard'

async function freePort (): Promise<number> {
  return await new Promise(resolve => { const s = createServer(); s.listen(0, '127.0.0.1', () => { const p = (s.address() as { port: number }).port; s.close(() => resolve(p)) }) })
}

if (!CHROMIUM) {
  t.test('the dashboard in a browser', { skip: 'headless Chromium: /usr/bin/chromium is not installed (apt-get install chromium)' }, () => {})
} else {
  // Result URLs are absolute under PUBLIC_BASE_URL: the browser must reach them, so the port is fixed up front.
  const port = await freePort()
  const base = `http://127.0.0.1:${port}`
  // veo3-fast (110 s) takes about 2.75 s.
  const rx = await startReceiver()
  t.teardown(() => rx.close())
  const s = await startServer(t, { PORT: String(port), PUBLIC_BASE_URL: base, SIM_SPEED: '40', WEBHOOK_ALLOWLIST: `127.0.0.1:${rx.port}` })
  await mkdir(OUT, { recursive: true })

  t.test('static files: content types, caching and the SPA fallback', async t => {
    const html = await fetch(`${base}/dashboard`)
    t.equal(html.status, 200)
    t.match(html.headers.get('content-type'), /^text\/html/)
    t.equal(html.headers.get('cache-control'), 'no-cache')
    t.match(html.headers.get('content-security-policy'), /script-src 'self'/)
    const text = await html.text()
    t.notMatch(text, /https?:\/\//, 'no external (CDN) URL in the page')
    const script = /src="(\/dashboard\/assets\/[^"]+\.js)"/.exec(text)?.[1]
    t.ok(script, 'the page loads a bundled script')
    const js = await fetch(base + script!, { headers: { 'accept-encoding': 'gzip' } })
    t.equal(js.status, 200)
    t.match(js.headers.get('content-type'), /^text\/javascript/)
    t.equal(js.headers.get('cache-control'), 'public, max-age=31536000, immutable')
    const etag = js.headers.get('etag')!
    t.equal((await fetch(base + script!, { headers: { 'accept-encoding': 'gzip', 'if-none-match': etag } })).status, 304)
    const slash = await fetch(`${base}/dashboard/`)
    t.equal(slash.status, 200)
    t.equal(await slash.text(), text, '/dashboard/ is the same page')
    const deep = await fetch(`${base}/dashboard/jobs/anything`)
    t.equal(deep.status, 200, 'any other path under /dashboard is the app page')
    t.equal(await deep.text(), text)
    const missing = await fetch(`${base}/dashboard/assets/nope.js`)
    t.equal(missing.status, 404)
    t.equal((await missing.json()).code, 'NOT_FOUND')
  })

  t.test('sign up, verify, key, video job live to completed, play, ledger, chart, revoke', async t => {
    const browser = await launchChromium()
    t.teardown(() => browser.close())
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } })
    page.on('dialog', d => { void d.accept() })
    const requests: string[] = []
    page.on('request', r => requests.push(new URL(r.url()).pathname + new URL(r.url()).search))
    const shot = (name: string) => page.screenshot({ path: `${OUT}/${name}.png`, fullPage: true })

    // Sign up (200 free credits) and land on the overview, logged in.
    await page.goto(`${base}/dashboard`)
    await page.getByRole('heading', { name: 'Log in' }).waitFor()
    await shot('01-login')
    await page.getByTestId('to-signup').click()
    const email = `dash${process.pid}@example.com`
    await page.fill('input[name=email]', email)
    await page.fill('input[name=password]', 'a long enough password')
    await shot('02-signup')
    await page.getByRole('button', { name: 'Create account' }).click()
    await page.getByTestId('whoami').filter({ hasText: email }).waitFor()
    await page.getByTestId('balance').filter({ hasText: '200' }).waitFor()

    // Unverified: key creation is refused with the API's own error.
    await page.goto(`${base}/dashboard#/keys`)
    await page.getByRole('button', { name: 'Create key' }).click()
    await page.getByRole('alert').filter({ hasText: 'NOT_ELIGIBLE' }).waitFor()

    // The operator verifies the account in the operator view.
    await page.goto(`${base}/dashboard#/operator`)
    await page.fill('input[name=admin_token]', ADMIN_TOKEN)
    await page.getByRole('button', { name: 'Open the operator view' }).click()
    const row = page.locator(`tr[data-account="${email}"]`)
    await row.getByRole('button', { name: 'Verify' }).click()
    await row.getByText('verified', { exact: true }).waitFor()
    // A grant from the operator view.
    await row.locator('input.amount').fill('50')
    await row.getByRole('button', { name: 'Grant' }).click()
    await row.locator('td.num').filter({ hasText: /^250$/ }).waitFor()
    await shot('03-operator')
    const acct = (await s.req('GET', '/v1/admin/accounts?q=' + encodeURIComponent(email), { admin: true })).body.data[0]
    t.equal(acct.email_verified, true, 'the account is verified')

    // A key: secret shown once, and it works against the API.
    await page.goto(`${base}/dashboard#/keys`)
    await page.fill('input[name=name]', 'from the dashboard')
    await page.fill('input[name=expires_in_days]', '30')
    await page.getByRole('button', { name: 'Create key' }).click()
    const secret = await page.locator('#secret-value').inputValue()
    t.match(secret, /^gjs_sk_[0-9a-f]{64}$/, 'the new key is shown')
    await page.getByRole('button', { name: 'Copy' }).waitFor()
    await page.locator('tr[data-key]').filter({ hasText: 'from the dashboard' }).waitFor()
    await shot('04-keys')
    t.equal((await s.req('GET', '/v1/credits', { key: secret })).status, 200, 'the key works')
    await page.getByRole('button', { name: 'Done' }).click()
    t.equal(await page.locator('#secret-value').count(), 0, 'the secret is gone once dismissed')

    // A video job from the form: the price shown is the API's price, then it runs live.
    await page.goto(`${base}/dashboard#/jobs`)
    await page.selectOption('select[name=kind]', 'video')
    await page.selectOption('select[name=model]', 'veo3-fast')
    const options = await page.locator('select[name=aspect_ratio] option').allTextContents()
    t.same(options, ['16:9', '9:16'], 'only the aspect ratios veo3-fast supports')
    t.equal(await page.locator('select[name=duration]').count(), 0, 'no duration select for a fixed-length model')
    await page.selectOption('select[name=model]', 'kling-3.0')
    await page.selectOption('select[name=mode]', 'pro')
    await page.selectOption('select[name=duration]', '10')
    const proPrice = `${priceVideo({ model: 'kling-3.0', mode: 'pro', duration: '10' })} credits`
    t.equal(await priceShown(page, proPrice), proPrice, 'price follows the options')
    await page.selectOption('select[name=model]', 'veo3-fast')
    const price = priceVideo({ model: 'veo3-fast' })
    t.equal(await priceShown(page, `${price} credits`), `${price} credits`, 'the price is shown before submitting')
    await page.fill('textarea[name=prompt]', 'a paper boat on a rainy street')
    const listLoads = requests.filter(r => r.startsWith('/v1/jobs?')).length
    await page.getByRole('button', { name: 'Create video' }).click()
    const jobRow = page.locator('tr[data-job]').first()
    await jobRow.waitFor()
    const jobId = await jobRow.getAttribute('data-job')
    t.match(jobId, /.+/, 'the new job is listed')
    const seen: string[] = []
    const deadline = Date.now() + 20000
    for (;;) {
      const st = await jobRow.getAttribute('data-status')
      if (st && seen.filter(x => x !== 'shot').pop() !== st) seen.push(st)
      if (st === 'processing' && !seen.includes('shot')) { await shot('05-jobs-live'); seen.push('shot') }
      if (st === 'completed' || st === 'failed' || Date.now() > deadline) break
      await page.waitForTimeout(50)
    }
    const statuses = seen.filter(x => x !== 'shot')
    t.equal(statuses[statuses.length - 1], 'completed', `the job completed (saw ${statuses.join(' -> ')})`)
    t.ok(statuses.includes('processing'), 'it was seen processing before completed')
    t.ok(requests.some(r => r.startsWith(`/v1/sse/jobs/${jobId}?ticket=`)), 'updates came over an SSE stream with a ticket')
    t.ok(requests.includes('/v1/sse/tickets'), 'the ticket came from POST /v1/sse/tickets')
    t.equal(requests.filter(r => r.startsWith('/v1/jobs?')).length, listLoads, 'the list was not polled')

    // Play the result.
    const video = page.locator(`video[data-testid="video-${jobId}"]`)
    await video.waitFor()
    const played = await video.evaluate(async (v: HTMLVideoElement) => {
      v.muted = true
      await v.play()
      // The first timeupdate past 0 (bounded: a media element that never plays fails the check below).
      if (v.currentTime === 0) {
        await new Promise<void>(resolve => {
          const bound = setTimeout(resolve, 10000)
          v.addEventListener('timeupdate', function on () { if (v.currentTime > 0) { clearTimeout(bound); v.removeEventListener('timeupdate', on); resolve() } })
        })
      }
      v.pause()
      return { currentTime: v.currentTime, poster: v.getAttribute('poster') ?? '', src: v.currentSrc, width: v.videoWidth, error: v.error?.code ?? null }
    })
    t.ok(played.currentTime > 0, `the video played (${played.currentTime.toFixed(2)} s)`)
    t.ok(played.width > 0, 'frames decoded')
    t.equal(played.error, null)
    // The poster is the library's thumbnail_url for this video when the service has one.
    const jwt = await page.evaluate(() => localStorage.getItem('genjobs.session'))
    const lib = await s.req('GET', '/v1/videos?limit=100', { jwt: jwt! })
    const item = lib.body.data.find((v: any) => v.video_url === played.src)
    t.ok(item, 'the played video is the library item of the job')
    t.equal(played.poster, item.thumbnail_url ?? '', 'the poster is the library thumbnail (none while the library has none)')
    await shot('06-jobs-completed')

    // An image job held in the queue ([sim:queue]) is cancelled from its row; another one
    // completes and its preview image loads.
    await page.selectOption('select[name=kind]', 'image')
    await page.selectOption('select[name=model]', 'nano-banana')
    t.equal(await priceShown(page, '10 credits'), '10 credits')
    await page.fill('textarea[name=prompt]', 'a lighthouse at dusk [sim:queue]')
    await page.getByRole('button', { name: 'Create image' }).click()
    const queued = page.locator('tr[data-job]').first()
    await page.locator('tr[data-job][data-status="queued"]').first().waitFor()
    const queuedId = await queued.getAttribute('data-job')
    t.not(queuedId, jobId)
    await queued.getByRole('button', { name: 'Cancel' }).click()
    await page.locator(`tr[data-job="${queuedId}"][data-status="cancelled"]`).waitFor()
    t.equal((await s.req('GET', `/v1/jobs/${queuedId}`, { jwt: (await page.evaluate(() => localStorage.getItem('genjobs.session')))! })).body.status, 'cancelled', 'the API agrees')
    await page.fill('textarea[name=prompt]', 'a lighthouse at dawn')
    await page.getByRole('button', { name: 'Create image' }).click()
    const imageRow = page.locator('tr[data-job]').first()
    await page.waitForFunction((id) => document.querySelector('tr[data-job]')?.getAttribute('data-job') !== id, queuedId)
    const img = imageRow.locator('img.preview')
    await img.waitFor({ timeout: 15000 })
    t.ok(await img.evaluate(async (el: HTMLImageElement) => { await el.decode(); return el.naturalWidth > 0 }), 'the image preview loads')

    // An instrumental music job: its style priced like the API, and the result plays.
    // The model is chosen the moment the kind's models are rendered, before any effect of that
    // render runs (a MutationObserver callback is a microtask): the choice must stick.
    await page.evaluate(() => new Promise<void>((resolve) => {
      const kind = document.querySelector<HTMLSelectElement>('select[name=kind]')!
      const model = document.querySelector<HTMLSelectElement>('select[name=model]')!
      const pick = () => {
        if (![...model.options].some(o => o.value === 'music')) return false
        model.value = 'music'
        model.dispatchEvent(new Event('change', { bubbles: true }))
        return true
      }
      const seen = new MutationObserver(() => { if (pick()) { seen.disconnect(); resolve() } })
      seen.observe(model, { childList: true, subtree: true, attributes: true })
      kind.value = 'audio'
      kind.dispatchEvent(new Event('change', { bubbles: true }))
    }))
    t.equal(await priceShown(page, `${priceAudio({ model: 'music' })} credits`), `${priceAudio({ model: 'music' })} credits`)
    await page.fill('textarea[name=prompt]', 'calm piano, rain outside')
    const imageId = await imageRow.getAttribute('data-job')
    await page.getByRole('button', { name: 'Create audio' }).click()
    await page.waitForFunction((id) => document.querySelector('tr[data-job]')?.getAttribute('data-job') !== id, imageId)
    const audio = page.locator('tr[data-job]').first().locator('audio.preview')
    await audio.waitFor({ timeout: 15000 })
    const heard = await audio.evaluate(async (a: HTMLAudioElement) => {
      a.muted = true
      await a.play()
      // The first timeupdate past 0 (bounded: a media element that never plays fails the check below).
      if (a.currentTime === 0) {
        await new Promise<void>(resolve => {
          const bound = setTimeout(resolve, 10000)
          a.addEventListener('timeupdate', function on () { if (a.currentTime > 0) { clearTimeout(bound); a.removeEventListener('timeupdate', on); resolve() } })
        })
      }
      a.pause()
      return a.currentTime
    })
    t.ok(heard > 0, 'the audio result plays')

    // The charge in the ledger and in the chart.
    await page.goto(`${base}/dashboard#/overview`)
    const charge = page.locator('[data-testid=ledger] tr').filter({ hasText: jobId! })
    await charge.waitFor()
    t.match(await charge.innerText(), new RegExp(`charge\\s+-${price}`), 'the ledger shows the charge with its job')
    t.match(await page.locator('[data-testid=ledger]').innerText(), /grant\s+\+200/, 'and the signup grant')
    const music = priceAudio({ model: 'music' })
    await page.getByTestId('spent').filter({ hasText: String(price + 10 + music) }).waitFor()
    // 200 signup + 50 grant - the video - 10 for the completed image (the cancelled one was refunded) - the music.
    await page.getByTestId('balance').filter({ hasText: String(250 - price - 10 - music) }).waitFor()
    t.match(await page.locator('[data-testid=ledger]').innerText(), /refund\s+\+10/, 'the cancel refund is listed')
    t.equal(await page.locator('[data-testid=usage-chart] canvas').count(), 1, 'the usage chart is drawn')
    t.match(await page.locator('[data-testid=usage-chart]').innerText(), /Credits spent/, 'with its spend series')
    t.match(await page.getByTestId('bars-jobs-by-model').innerText(), /veo3-fast\s+1/)
    t.match(await page.getByTestId('bars-jobs-by-model').innerText(), /nano-banana\s+2/)
    t.match(await page.getByTestId('bars-jobs-by-status').innerText(), /cancelled\s+1/)
    await shot('07-overview')

    // Revoke the key: the API refuses it from then on.
    await page.goto(`${base}/dashboard#/keys`)
    const keyRow = page.locator('tr[data-key]').filter({ hasText: 'from the dashboard' })
    await keyRow.getByRole('button', { name: 'Revoke' }).click()
    await keyRow.waitFor({ state: 'detached' })
    const after = await s.req('GET', '/v1/credits', { key: secret })
    t.equal(after.status, 401)
    t.equal(after.body.code, 'INVALID_API_KEY', 'the revoked key is refused')

    // Webhooks page: register one (the secret is shown once), then its delivery history.
    await page.goto(`${base}/dashboard#/webhooks`)
    const hookUrl = rx.url('/dashboard-hook')
    await page.fill('input[name=url]', hookUrl)
    await page.getByRole('button', { name: 'Register' }).click()
    const hookSecret = await page.locator('#secret-value').inputValue()
    t.match(hookSecret, /^[0-9a-f]{64}$/, 'the signing secret is shown')
    rx.route('/dashboard-hook', hookSecret, [])
    await page.getByRole('button', { name: 'Deliveries' }).click()
    await page.getByText('No deliveries yet.').waitFor()
    const jwtNow = (await page.evaluate(() => localStorage.getItem('genjobs.session')))!
    const hooked = await s.req('POST', '/v1/generate/image', { jwt: jwtNow, body: { model: 'nano-banana', prompt: 'a kite' } })
    t.equal(hooked.status, 201)
    const got = await settled(() => rx.received.find(r => r.path === '/dashboard-hook'), r => r !== undefined, { timeoutMs: 15000, everyMs: 50 })
    t.ok(got, 'the receiver got the job.completed delivery')
    t.equal(got?.rejected, null, 'signed with the secret the page showed')
    t.equal(got?.json?.data?.job?.id, hooked.body.id)
    await page.getByRole('button', { name: 'Hide' }).click()
    await page.getByRole('button', { name: 'Deliveries' }).click()
    const delivery = page.locator('.deliveries tr').filter({ hasText: hooked.body.id })
    await delivery.getByText('delivered', { exact: true }).waitFor()
    await shot('08-webhooks')

    // Everything the page fetched: its own files, the public API, and the media.
    const foreign = requests.filter(r => !/^\/(dashboard|v1|files)(\/|\?|$)/.test(r))
    t.same(foreign, [], 'the dashboard talks only to the public API')
  })
}
