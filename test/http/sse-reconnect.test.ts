// docs/api.md "Server-Sent Events": a reconnect whose Last-Event-ID is at or past `done` of a
// terminal job answers 204, which stops a standard EventSource; a fresh connection still gets
// status then done. Checked with the `eventsource` package and headless Chromium, counting the
// stream requests that reach the server.
import t from 'tap'
import { EventSource } from 'eventsource'
import { startServer } from '../helpers/server.js'
import { CHROMIUM, launchChromium } from '../helpers/browser.js'
import { openSse } from '../helpers/sse.js'
import { UNLIMITED_TIERS, dbOf, paidUser, pollJob } from '../helpers/jobs.js'
import { sleep, waitFor } from '../helpers/wait.js'

const s = await startServer(t, { SIM_SPEED: '1000', TIER_LIMITS: UNLIMITED_TIERS })
const u = await paidUser(s, 10_000)

const db = dbOf(t, s)
/**
 * Stream requests (GET /v1/sse/jobs/<id>) the server answered for one job, with their status,
 * oldest first: read from request_log after flushing the metering of every front-end thread,
 * so a request answered by any thread counts (TEST_FRONTENDS=2 runs two).
 */
async function hitsOf (id: string): Promise<number[]> {
  await s.app.services.metering.flush()
  const rows = await db<Array<{ status: number }>>`
    SELECT status FROM request_log WHERE method = 'GET' AND endpoint = ${`/v1/sse/jobs/${id}`} ORDER BY at, id`
  return rows.map(r => r.status)
}
/** Resolves once `pred` holds over the stream requests of `ids` (checked every 100 ms). */
async function until (ids: string[], pred: (hits: number[][]) => boolean, timeoutMs = 15_000): Promise<void> {
  let hits: number[][] = []
  await waitFor(async () => pred(hits = await Promise.all(ids.map(hitsOf))), { what: () => `stream requests ${JSON.stringify(hits)} to settle`, timeoutMs, everyMs: 100 })
}

async function finishedJob (): Promise<string> {
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: 'a red kite over green hills' } })
  t.equal(r.status, 201)
  await pollJob(s, u, r.body.id, { everyMs: 50 })
  return r.body.id
}

t.test('a fresh connection to a terminal job gets status then done; a reconnect with the done id gets 204 and no body', async (t) => {
  const id = await finishedJob()
  const first = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': u.key })
  t.equal(first.status, 200)
  await first.closed
  t.same(first.events.map(e => e.event), ['status', 'done'])
  const doneId = first.events[1].id!
  const again = await fetch(`${s.url}/v1/sse/jobs/${id}`, { headers: { 'x-api-key': u.key, 'last-event-id': doneId } })
  t.equal(again.status, 204, 'at the done id: 204')
  t.equal(await again.text(), '', 'no body')
  const past = await fetch(`${s.url}/v1/sse/jobs/${id}`, { headers: { 'x-api-key': u.key, 'last-event-id': String(Number(doneId) + 5) } })
  t.equal(past.status, 204, 'past the done id: 204')
  await past.text()
  // Before done (the status id): the client still lacks done, so it gets it.
  const before = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': u.key, 'last-event-id': first.events[0].id! })
  t.equal(before.status, 200)
  await before.closed
  t.same(before.events.map(e => e.event), ['done'], 'only the missing done')
})

const browserOk = CHROMIUM !== undefined
t.test('after done, neither the eventsource package nor Chromium reconnects within 10 s', async (t) => {
  const a = await finishedJob()
  const b = browserOk ? await finishedJob() : null
  // eventsource (npm): server-style credentials through its fetch hook.
  const seen: string[] = []
  const es = new EventSource(`${s.url}/v1/sse/jobs/${a}`, {
    fetch: (input, init) => fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), 'x-api-key': u.key } }),
  })
  t.teardown(() => es.close())
  es.addEventListener('status', () => seen.push('status'))
  es.addEventListener('done', () => seen.push('done'))
  const stopped = new Promise<void>(resolve => { es.onerror = () => { if (es.readyState === EventSource.CLOSED) resolve() } })

  let browserResult: Promise<{ events: string[]; state: number }> | null = null
  if (b !== null) {
    const browser = await launchChromium()
    t.teardown(() => browser.close())
    const page = await browser.newPage()
    await page.goto(`${s.url}/v1/health`)
    const { ticket } = (await s.req('POST', '/v1/sse/tickets', { key: u.key, body: { jobId: b } })).body
    browserResult = page.evaluate(async (url: string) => {
      return await new Promise<{ events: string[]; state: number }>((resolve) => {
        const events: string[] = []
        const es = new EventSource(url)
        es.addEventListener('status', () => events.push('status'))
        es.addEventListener('done', () => events.push('done'))
        // A 204 fails the connection for good: readyState CLOSED, no further reconnect.
        es.onerror = () => { if (es.readyState === EventSource.CLOSED) resolve({ events, state: es.readyState }) }
      })
    }, `${s.url}/v1/sse/jobs/${b}?ticket=${encodeURIComponent(ticket)}`)
  } else {
    t.comment('headless Chromium not installed: browser half skipped')
  }

  // Each client: one 200 (status, done), then one reconnect answered 204.
  const ids = b === null ? [a] : [a, b]
  await until(ids, (hits) => hits.every(h => h.includes(204)))
  await stopped
  t.same(seen, ['status', 'done'], 'eventsource: status then done, once')
  t.equal(es.readyState, EventSource.CLOSED, 'eventsource: closed by the 204')
  if (browserResult) {
    const r = await browserResult
    t.same(r.events, ['status', 'done'], 'Chromium: status then done, once')
    t.equal(r.state, 2, 'Chromium: EventSource CLOSED')
  }
  // The observation window itself (the one fixed wait): a storm reconnects every 3 s.
  await sleep(10_000) // time: proves no reconnect follows the 204 within a window of three storm periods
  t.same(await hitsOf(a), [200, 204], 'eventsource: one 200, one 204, no request after the 204 within 10 s')
  if (b !== null) t.same(await hitsOf(b), [200, 204], 'Chromium: one 200, one 204, no request after the 204 within 10 s')
})
