import t from 'tap'
import { startServer, createUser } from '../helpers/server.js'
import { CHROMIUM, launchChromium } from '../helpers/browser.js'

if (!CHROMIUM) {
  t.test('a browser EventSource sees a live job', { skip: 'headless Chromium: /usr/bin/chromium is not installed (apt-get install chromium)' }, () => {})
} else {
  const s = await startServer(t, { SIM_SPEED: '25', TIER_LIMITS: JSON.stringify({ pro: { rpm: 100000 } }) })
  const u = await createUser(s, { credits: 10000 })
  await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 1000 } })

  t.test('a browser EventSource with ?ticket= sees status, progress and done for a live job', async (t) => {
    const browser = await launchChromium()
    t.teardown(() => browser.close())
    const page = await browser.newPage()
    // The page comes from the service's own origin (GET /v1/health) so EventSource is same-origin.
    await page.goto(`${s.url}/v1/health`)
    // The job starts once the browser is ready, so the stream sees it live.
    const job = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'gpt-image-2.5', prompt: 'a red kite over hills', resolution: '4K' } })
    t.equal(job.status, 201)
    const id = job.body.id
    const { ticket } = (await s.req('POST', '/v1/sse/tickets', { key: u.key, body: { jobId: id } })).body
    const seen = await page.evaluate(async (url: string) => {
      return await new Promise<Array<{ type: string; data: any }>>((resolve, reject) => {
        const out: Array<{ type: string; data: any }> = []
        const es = new EventSource(url)
        const timer = setTimeout(() => { es.close(); reject(new Error('no done: ' + JSON.stringify(out))) }, 15000)
        es.addEventListener('status', (e) => out.push({ type: 'status', data: JSON.parse((e as MessageEvent).data) }))
        es.addEventListener('done', (e) => { out.push({ type: 'done', data: JSON.parse((e as MessageEvent).data) }); clearTimeout(timer); es.close(); resolve(out) })
      })
    }, `${s.url}/v1/sse/jobs/${id}?ticket=${encodeURIComponent(ticket)}`)
    const statuses = seen.filter(e => e.type === 'status').map(e => e.data)
    t.ok(statuses.some(x => x.status === 'processing' && x.progress > 0), 'progress seen')
    t.equal(statuses[statuses.length - 1].status, 'completed')
    t.equal(seen[seen.length - 1].type, 'done')
    t.same(seen[seen.length - 1].data, { id, status: 'completed' })
  })
}
