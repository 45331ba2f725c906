// The dashboard's second step (docs/dashboard.md) driven in Chromium through the real server,
// as a user and an operator would: an image-to-video job made with an uploaded image, its page
// (inputs, media, timeline, cost), its curl / JavaScript / Python snippets copied and run (each
// creates the same job again); jobs filters and search; a webhook endpoint page that sends a
// test event to a local receiver, redelivers a failed delivery and rotates the secret; the
// operator console granting credits and finding a job's upstream history. Every page passes an
// axe-core check (no serious or critical violation) at 1280 px, and the job page on a phone
// width. Screenshots go to test-output/dashboard-pages/, or with DASHBOARD_SHOTS=docs to docs/
// (the pictures of docs/dashboard.md: `DASHBOARD_SHOTS=docs node scripts/test.mjs test/browser/dashboard-pages.test.ts`).
import { execFile } from 'node:child_process'
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { CHROMIUM, launchChromium } from '../helpers/browser.js'
import { ADMIN_TOKEN, createUser, startServer } from '../helpers/server.js'
import { png } from '../fixtures/media.js'
import { startReceiver } from '../fixtures/webhook-receiver.js'
import { waitFor } from '../helpers/wait.js'

const run = promisify(execFile)

async function freePort (): Promise<number> {
  return await new Promise(resolve => { const s = createServer(); s.listen(0, '127.0.0.1', () => { const p = (s.address() as { port: number }).port; s.close(() => resolve(p)) }) })
}

type Page = import('playwright-core').Page

/** axe-core on the page as it is: the violations of impact serious or critical (none expected). */
async function seriousViolations (page: Page): Promise<string[]> {
  const source = await readFile('node_modules/axe-core/axe.min.js', 'utf8')
  // evaluate runs outside the page's CSP (script-src 'self' forbids an injected script tag).
  await page.evaluate(source)
  const violations = await page.evaluate(async () => {
    const r = await (window as any).axe.run(document, { resultTypes: ['violations'] })
    return r.violations.map((v: any) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n: any) => n.target.join(' ')) }))
  }) as Array<{ id: string; impact: string; help: string; nodes: string[] }>
  return violations.filter(v => v.impact === 'serious' || v.impact === 'critical').map(v => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.join(', ')}`)
}

if (!CHROMIUM) {
  t.test('the dashboard pages in a browser', { skip: 'headless Chromium: /usr/bin/chromium is not installed (apt-get install chromium)' }, () => {})
} else {
  const port = await freePort()
  const base = `http://127.0.0.1:${port}`
  const rx = await startReceiver()
  t.teardown(() => rx.close())
  // veo3-fast on a simulated route of PROVIDERS_FILE: the operator sees its upstream history and route.
  const dir = await mkdtemp(join(tmpdir(), 'gjt-dash-'))
  const providers = join(dir, 'providers.json')
  await writeFile(providers, JSON.stringify({ routes: { 'veo3-fast': [{ provider: 'simulated', max_concurrent: 8 }] } }))
  const s = await startServer(t, {
    PORT: String(port), PUBLIC_BASE_URL: base, SIM_SPEED: '40', WEBHOOK_ALLOWLIST: `127.0.0.1:${rx.port}`, PROVIDERS_FILE: providers,
    TIER_LIMITS: '{"pro":{"rpm":100000,"max_concurrent":1000}}',
    // Retries 100 times later than the schedule: a failed delivery stays failed (5 s -> 500 s) while the page redelivers it.
    WEBHOOK_RETRY_SCALE: '100',
  })
  const OUT = process.env.DASHBOARD_SHOTS === 'docs' ? 'docs' : 'test-output/dashboard-pages'
  await mkdir(OUT, { recursive: true })
  const u = await createUser(s, { credits: 100 })
  const bought = await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 2000 } })
  if (bought.status !== 201) throw new Error(`purchase: ${bought.text}`)

  const browser = await launchChromium()
  t.teardown(() => browser.close())
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, permissions: ['clipboard-read', 'clipboard-write'] })
  const page = await context.newPage()
  page.on('dialog', d => { void d.accept() })
  const errors: string[] = []
  page.on('pageerror', e => errors.push(String(e)))
  const shot = (name: string) => page.screenshot({ path: `${OUT}/${name}.png`, fullPage: true })
  const a11y = async (t: { same: (a: unknown, b: unknown, m: string) => void }, what: string) => { t.same(await seriousViolations(page), [], `${what}: axe-core finds no serious violation`) }

  // Logged in as the user (the login page itself is covered by test/browser/dashboard.test.ts).
  await page.goto(`${base}/dashboard`)
  await page.evaluate((jwt) => localStorage.setItem('genjobs.session', jwt), u.jwt)

  let jobId = ''
  t.test('image-to-video with an uploaded image, its page, and its snippets run as they are', { timeout: 120_000 }, async t => {
    await page.goto(`${base}/dashboard#/jobs`)
    await page.reload()
    await page.selectOption('select[name=kind]', 'video')
    await page.selectOption('select[name=model]', 'veo3-fast')
    await page.locator('input[type=file][name=image_url]').setInputFiles({ name: 'first-frame.png', mimeType: 'image/png', buffer: png() })
    const chip = page.locator('[data-field=image_url] [data-testid=uploaded] img')
    await chip.waitFor()
    const uploaded = await chip.getAttribute('src')
    t.match(uploaded, new RegExp(`^${base}/files/`), 'the image was uploaded through POST /v1/uploads')
    t.ok(await chip.evaluate(async (el: HTMLImageElement) => { await el.decode(); return el.naturalWidth > 0 }), 'its thumbnail loads')
    await page.fill('textarea[name=prompt]', 'the first frame comes alive')
    await a11y(t, 'jobs page with the create form')
    await shot('dashboard-job-form')
    await page.getByRole('button', { name: 'Create video' }).click()
    const row = page.locator('tr[data-job]').first()
    await row.filter({ hasText: 'the first frame comes alive' }).waitFor()
    jobId = (await row.getAttribute('data-job'))!
    const api = await s.req('GET', `/v1/jobs/${jobId}/details`, { key: u.key })
    t.equal(api.body.request.body.image_url, uploaded, 'the job was made with the uploaded image')

    await row.getByRole('link', { name: jobId }).click()
    await page.waitForURL(`**/dashboard#/jobs/${jobId}`)
    await page.locator('[data-testid=job-page][data-status=completed]').waitFor({ timeout: 20000 })
    const video = page.getByTestId('job-video')
    await video.waitFor()
    t.ok(await video.evaluate(async (v: HTMLVideoElement) => {
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
      return v.currentTime > 0
    }), 'the result plays on the job page')
    t.equal(await page.locator(`[data-testid=inputs] img[src="${uploaded}"]`).count(), 1, 'the uploaded input is shown')
    t.equal(await page.getByTestId('charged').innerText(), '120')
    const kinds = await page.locator('[data-testid=timeline] li').evaluateAll(els => els.map(e => e.getAttribute('data-kind')))
    t.ok(['created', 'charged', 'submitted', 'completed'].every(k => kinds.includes(k)), `the timeline has the job's events (${kinds.join(', ')})`)
    await a11y(t, 'job page')
    await shot('dashboard-job')

    // Each snippet, copied from the page and run as it is, creates the same job again.
    const env = { PATH: process.env.PATH ?? '', GENJOBS_API_KEY: u.key }
    const runs: Record<string, (code: string) => Promise<string>> = {
      curl: async code => (await run('bash', ['-c', code], { env })).stdout,
      JavaScript: async code => (await run(process.execPath, ['--input-type=module', '-e', code], { env })).stdout,
      Python: async code => (await run('python3', ['-c', code], { env })).stdout,
    }
    for (const [lang, exec] of Object.entries(runs)) {
      await page.getByRole('tab', { name: lang }).click()
      await page.getByRole('button', { name: `Copy ${lang}` }).click()
      await page.getByRole('button', { name: 'Copied' }).waitFor()
      const code = await page.evaluate(() => navigator.clipboard.readText())
      t.equal(code, await page.getByTestId('snippet').innerText(), `${lang}: the clipboard holds the snippet shown`)
      t.notMatch(code, new RegExp(u.key), `${lang}: no key in the snippet`)
      const out = await exec(code)
      // curl prints JSON; node and Python print their own object notation.
      const id = /\bid['"]?:\s*['"](job_[^'"]+)['"]/.exec(out)?.[1]
      t.ok(id && id !== jobId, `${lang}: the snippet created a new job (${out.slice(0, 120)})`)
      const again = await s.req('GET', `/v1/jobs/${id}/details`, { key: u.key })
      t.same(again.body.request, api.body.request, `${lang}: the same request`)
    }

    // The same page on a phone.
    await page.setViewportSize({ width: 390, height: 844 })
    await page.reload()
    await page.locator('[data-testid=job-page][data-status=completed]').waitFor()
    t.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1), 'no sideways scrolling at 390 px')
    await a11y(t, 'job page at 390 px')
    await shot('dashboard-job-phone')
    await page.setViewportSize({ width: 1280, height: 900 })
  })

  t.test('jobs list: filters, search and the keyboard', async t => {
    const img = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a lonely lighthouse' } })
    t.equal(img.status, 201)
    await page.goto(`${base}/dashboard#/jobs`)
    await page.locator(`tr[data-job="${img.body.id}"]`).waitFor()
    await page.selectOption('select[name=filter_type]', 'image')
    await page.locator(`tr[data-job="${jobId}"]`).waitFor({ state: 'detached' })
    t.equal(await page.locator(`tr[data-job="${img.body.id}"]`).count(), 1, 'type filter keeps the image')
    await page.selectOption('select[name=filter_type]', '')
    await page.fill('input[name=q]', 'alive')
    await page.keyboard.press('Enter')
    await page.locator(`tr[data-job="${img.body.id}"]`).waitFor({ state: 'detached' })
    const ids = await page.locator('tr[data-job]').evaluateAll(els => els.map(e => e.getAttribute('data-job')))
    t.ok(ids.includes(jobId) && ids.length === 4, `search finds the image-to-video job and its three copies (${ids.length})`)
    await page.selectOption('select[name=filter_status]', 'failed')
    await page.getByText('No job matches these filters.').waitFor()
    await page.getByRole('button', { name: 'Clear' }).click()
    await page.locator(`tr[data-job="${img.body.id}"]`).waitFor()
    // The job link is reachable from the keyboard.
    await page.locator(`a[href="#/jobs/${img.body.id}"]`).focus()
    await page.keyboard.press('Enter')
    await page.locator('[data-testid=job-page]').waitFor()
    t.match(page.url(), new RegExp(`#/jobs/${img.body.id}$`))
    await page.goto(`${base}/dashboard#/jobs`)
    await page.locator('tr[data-job]').first().waitFor()
    await a11y(t, 'jobs list')
    await shot('dashboard-jobs-filters')
  })

  t.test('webhook endpoint page: test event, redeliver a failed delivery, rotate the secret', async t => {
    // The snippets' jobs may still be running: their events must not take the receiver's scripted 500.
    await waitFor(async () => (await Promise.all(['queued', 'submitted', 'processing'].map(st => s.req('GET', `/v1/jobs?status=${st}&limit=1`, { key: u.key }))))
      .every(r => r.body.total === 0), { what: 'the snippets\' jobs to finish', timeoutMs: 30000, everyMs: 50 })
    const secret = 'dashboard-hook-secret-01'
    rx.route('/endpoint', secret, [500])
    const hook = (await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: rx.url('/endpoint'), events: ['job.completed'], secret } })).body
    const job = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a kite for the webhook' } })
    t.equal(job.status, 201)
    // The job's delivery fails once (500) and waits for its retry (5 s).
    const first = await rx.waitFor('/endpoint', 1)
    t.equal(first[0].answered, 500)
    await page.goto(`${base}/dashboard#/webhooks/${hook.id}`)
    const failed = page.locator('tr[data-delivery][data-status=pending]').filter({ hasText: job.body.id })
    await failed.waitFor()
    await page.getByRole('button', { name: 'Send test event' }).click()
    const result = page.getByTestId('send-result')
    await result.filter({ hasText: 'Test event: delivered' }).waitFor()
    t.equal(await page.getByTestId('result-code').innerText(), '200')
    t.equal(rx.verified('/endpoint').filter(r => r.event === 'webhook.test').length, 1, 'the receiver verified the test event')
    await page.locator('tr[data-delivery]').filter({ hasText: 'webhook.test' }).waitFor()

    await failed.getByRole('button', { name: 'Redeliver' }).click()
    await result.filter({ hasText: 'delivered' }).filter({ hasText: 'Redelivery' }).waitFor()
    await page.locator('tr[data-delivery][data-status=delivered]').filter({ hasText: job.body.id }).waitFor()
    const got = rx.verified('/endpoint').filter(r => r.json?.data?.job?.id === job.body.id)
    t.equal(got.length, 2, 'the job event arrived again')
    t.equal(got[1].deliveryId, got[0].deliveryId, 'with the same X-Service-Delivery')
    const row = page.locator('tr[data-delivery]').filter({ hasText: job.body.id })
    await row.getByRole('button', { name: 'Details' }).click()
    await page.getByText('receiver says 500').first().waitFor()
    await a11y(t, 'webhook endpoint page')
    await shot('dashboard-webhook')

    await page.getByRole('button', { name: 'Rotate secret' }).click()
    const newSecret = await page.locator('#secret-value').inputValue()
    t.match(newSecret, /^[0-9a-f]{64}$/, 'the new secret is shown once')
    rx.route('/endpoint', newSecret)
    await page.getByRole('button', { name: 'Done' }).click()
    const before = await page.getByTestId('send-result').getAttribute('data-delivery')
    await page.getByRole('button', { name: 'Send test event' }).click()
    await page.locator(`[data-testid=send-result][data-delivered=true]:not([data-delivery="${before}"])`).waitFor()
    t.equal(rx.verified('/endpoint').filter(r => r.event === 'webhook.test').length, 2, 'the next test event verifies with the new secret')
  })

  t.test('operator console: create and find an account, grant credits, a job\'s upstream history, routes, failing deliveries', { timeout: 120_000 }, async t => {
    rx.route('/always-down', 'always-down-secret-01', Array(20).fill(503))
    const hook = (await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: rx.url('/always-down'), events: ['job.completed'], secret: 'always-down-secret-01' } })).body
    const job = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a kite nobody receives' } })
    await waitFor(() => rx.received.some(r => r.path === '/always-down'), { what: 'a delivery attempt to /always-down', timeoutMs: 15000, everyMs: 25 })

    await page.goto(`${base}/dashboard#/operator`)
    await page.evaluate(() => sessionStorage.removeItem('genjobs.admin'))
    await page.reload()
    await page.fill('input[name=admin_token]', ADMIN_TOKEN)
    await page.getByRole('button', { name: 'Open the operator view' }).click()
    const email = `console${process.pid}@example.com`
    await page.fill('input[name=new_email]', email)
    await page.fill('input[name=new_password]', 'a long enough password')
    await page.fill('input[name=new_credits]', '200')
    await page.getByRole('button', { name: 'Create account' }).click()
    const acct = page.locator(`tr[data-account="${email}"]`)
    await acct.waitFor()
    t.equal(await page.locator('tr[data-account]').count(), 1, 'the search shows the new account only')
    await acct.getByRole('spinbutton').fill('75')
    await acct.getByRole('button', { name: 'Grant' }).click()
    await acct.locator('td.num').filter({ hasText: /^275$/ }).waitFor()
    const api = (await s.req('GET', `/v1/admin/accounts?q=${encodeURIComponent(email)}`, { admin: true })).body.data[0]
    t.equal(api.credits, 275, 'the grant is in the ledger')
    await acct.getByRole('button', { name: 'Ban' }).click()
    await acct.getByText('banned').waitFor()

    await page.fill('input[name=admin_job_id]', jobId)
    await page.getByRole('button', { name: 'Find' }).click()
    const history = page.locator('[data-testid=upstream-events] tbody tr')
    await history.first().waitFor()
    const sources = await history.locator('td:nth-child(2)').allInnerTexts()
    t.ok(sources.includes('submit'), `the upstream history of ${jobId} (${sources.join(', ')})`)
    t.match(await page.getByTestId('admin-job').innerText(), /veo3-fast#0:simulated/, 'with its route')
    await page.locator('[data-testid=provider-routes] tr').filter({ hasText: 'veo3-fast' }).waitFor()
    // Listed once its failed attempt is recorded (the receiver has answered by now; the list is refreshed on demand).
    const failing = page.locator('[data-testid=failing-deliveries] tr').filter({ hasText: job.body.id })
    for (let i = 0; i < 50 && await failing.count() === 0; i++) {
      await page.getByRole('button', { name: 'Refresh' }).last().click()
      await page.waitForResponse(r => r.url().includes('/v1/admin/deliveries'))
    }
    await failing.waitFor()
    t.ok(hook.id > 0)
    await a11y(t, 'operator console')
    await shot('dashboard-operator')
  })

  t.test('no script error on any page', async t => { t.same(errors, []) })
}
