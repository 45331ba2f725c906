import t from 'tap'
import { EventSource } from 'eventsource'
import { startServer, createUser } from '../helpers/server.js'
import { assertError } from '../helpers/assert.js'
import { openSse } from '../helpers/sse.js'
import { settled } from '../helpers/wait.js'

const s = await startServer(t, {
  SIM_SPEED: '100',
  SSE_HEARTBEAT_MS: '200',
  TIER_LIMITS: JSON.stringify({ free: { rpm: 100000, max_concurrent: 1000, max_streams: 2 }, pro: { rpm: 100000, max_concurrent: 1000, max_streams: 50 } }),
})

async function paidUser () {
  const u = await createUser(s, { credits: 100000 })
  const r = await s.req('POST', `/v1/admin/accounts/${u.id}/purchases`, { admin: true, body: { credits: 1000 } })
  t.equal(r.status, 201)
  return u
}

async function imageJob (key: string, prompt = 'a lighthouse at dawn') {
  const r = await s.req('POST', '/v1/generate/image', { key, body: { model: 'gpt-image-2.5', prompt, resolution: '4K' } })
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
  return r.body.id as string
}

const u = await paidUser()

t.test('POST /v1/sse/tickets answers a 300 s ticket for an own job and 404 JOB_NOT_FOUND otherwise', async (t) => {
  const id = await imageJob(u.key)
  const r = await s.req('POST', '/v1/sse/tickets', { key: u.key, body: { jobId: id } })
  t.equal(r.status, 200)
  t.type(r.body.ticket, 'string')
  t.equal(r.body.expires_in, 300)
  const other = await paidUser()
  assertError(t, await s.req('POST', '/v1/sse/tickets', { key: other.key, body: { jobId: id } }), 404, 'JOB_NOT_FOUND')
  assertError(t, await s.req('POST', '/v1/sse/tickets', { key: u.key, body: { jobId: 'job_nope' } }), 404, 'JOB_NOT_FOUND')
  assertError(t, await s.req('POST', '/v1/sse/tickets', { key: u.key, body: {} }), 400, 'VALIDATION_ERROR')
})

t.test('a stream with auth headers sees status changes with ids, heartbeats, then done, and closes', async (t) => {
  const id = await imageJob(u.key)
  const st = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': u.key })
  t.equal(st.status, 200)
  t.match(st.headers.get('content-type'), /^text\/event-stream/)
  t.match(st.headers.get('cache-control'), /no-cache/)
  await st.closed
  const kinds = st.events.map(e => e.event)
  t.equal(kinds[kinds.length - 1], 'done', 'done is last')
  const statuses = st.events.filter(e => e.event === 'status').map(e => JSON.parse(e.data))
  t.ok(statuses.length >= 2, 'several status events')
  t.equal(statuses[statuses.length - 1].status, 'completed')
  t.match(statuses[statuses.length - 1].result_url, /\/files\/results\//)
  const progress = statuses.map(x => x.progress)
  t.same(progress, [...progress].sort((a, b) => a - b), 'progress never goes back')
  for (const e of st.events) t.ok(e.id !== undefined && /^\d+$/.test(e.id!), `event ${e.event} has a numeric id`)
  const ids = st.events.filter(e => e.event !== 'heartbeat').map(e => Number(e.id))
  t.same(ids, [...ids].sort((a, b) => a - b), 'ids are monotonic')
  t.same(JSON.parse(st.events[st.events.length - 1].data), { id, status: 'completed' })
})

t.test('heartbeats carry {ts} every SSE_HEARTBEAT_MS', async (t) => {
  const id = await imageJob(u.key, 'slow [sim:queue]')
  const st = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': u.key })
  const hb = await st.waitFor(e => e.event === 'heartbeat', 3000)
  t.ok(!Number.isNaN(Date.parse(JSON.parse(hb.data).ts)))
  st.abort()
  await s.req('DELETE', `/v1/jobs/${id}`, { key: u.key })
})

t.test('a terminal job gets one status and done at once', async (t) => {
  const id = await imageJob(u.key)
  await (await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': u.key })).closed
  const st = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': u.key })
  await st.closed
  t.same(st.events.map(e => e.event), ['status', 'done'])
})

t.test('Last-Event-ID resumes without repeating', async (t) => {
  const id = await imageJob(u.key)
  const first = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': u.key })
  await first.closed
  const lastStatus = first.events.filter(e => e.event === 'status').pop()!
  const again = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': u.key, 'last-event-id': lastStatus.id! })
  await again.closed
  t.same(again.events.map(e => e.event), ['done'], 'only done: the final status was seen already')
})

t.test('?ticket= works; bad, expired and other-job tickets are 401 INVALID_TICKET; ?api_key= is 401', async (t) => {
  const id = await imageJob(u.key)
  const id2 = await imageJob(u.key)
  const issued = await s.req('POST', '/v1/sse/tickets', { key: u.key, body: { jobId: id } })
  t.equal(issued.headers.get('cache-control'), 'no-store', 'a ticket is a credential: not stored by caches')
  const { ticket } = issued.body
  const st = await openSse(`${s.url}/v1/sse/jobs/${id}?ticket=${encodeURIComponent(ticket)}`)
  t.equal(st.status, 200)
  await st.closed
  t.equal(st.events[st.events.length - 1].event, 'done')

  const bad = await openSse(`${s.url}/v1/sse/jobs/${id}?ticket=garbage`)
  assertError(t, { status: bad.status, body: JSON.parse(bad.body) }, 401, 'INVALID_TICKET')
  const tampered = ticket.slice(0, -2) + (ticket.endsWith('A') ? 'BB' : 'AA')
  const tam = await openSse(`${s.url}/v1/sse/jobs/${id}?ticket=${tampered}`)
  assertError(t, { status: tam.status, body: JSON.parse(tam.body) }, 401, 'INVALID_TICKET')
  const other = await openSse(`${s.url}/v1/sse/jobs/${id2}?ticket=${encodeURIComponent(ticket)}`)
  assertError(t, { status: other.status, body: JSON.parse(other.body) }, 401, 'INVALID_TICKET')
  const old = s.app.services.tickets.issue(id, u.id, Date.now() - 301_000).ticket
  const exp = await openSse(`${s.url}/v1/sse/jobs/${id}?ticket=${encodeURIComponent(old)}`)
  assertError(t, { status: exp.status, body: JSON.parse(exp.body) }, 401, 'INVALID_TICKET')
  t.match(JSON.parse(exp.body).message, /has expired .*ask for a new one with POST \/v1\/sse\/tickets/, 'an expired ticket says how to get a new one')
  for (const name of ['api_key', 'key']) {
    const q = await openSse(`${s.url}/v1/sse/jobs/${id}?${name}=${u.key}`)
    assertError(t, { status: q.status, body: JSON.parse(q.body) }, 401, 'INVALID_API_KEY', `?${name}=`)
    t.match(JSON.parse(q.body).message, `(?${name}=) are never accepted`)
    t.match(JSON.parse(q.body).message, 'use ?ticket= (POST /v1/sse/tickets)', 'the stream\'s own hint: a browser needs a ticket')
  }
  const none = await openSse(`${s.url}/v1/sse/jobs/${id}`)
  assertError(t, { status: none.status, body: JSON.parse(none.body) }, 401, 'AUTH_REQUIRED')
  const foreign = await paidUser()
  const nf = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': foreign.key })
  assertError(t, { status: nf.status, body: JSON.parse(nf.body) }, 404, 'JOB_NOT_FOUND')
})

t.test('streams are capped per account (429 TOO_MANY_STREAMS) and an aborted stream frees its slot at once', async (t) => {
  const free = await createUser(s, { credits: 1000 })
  const id = await imageJob(free.key, 'waiting [sim:queue]')
  const a = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': free.key })
  const b = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': free.key })
  t.equal(a.status, 200)
  t.equal(b.status, 200)
  const c = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': free.key })
  assertError(t, { status: c.status, body: JSON.parse(c.body) }, 429, 'TOO_MANY_STREAMS')
  t.equal(s.app.services.sse.openStreams(free.id), 2)
  a.abort()
  t.equal(await settled(() => s.app.services.sse.openStreams(free.id), n => n === 1, { timeoutMs: 2000 }), 1, 'the aborted stream released its slot')
  const d = await openSse(`${s.url}/v1/sse/jobs/${id}`, { 'x-api-key': free.key })
  t.equal(d.status, 200, 'a new stream fits again')
  // Cancelling ends both streams with done, which frees their slots too.
  await s.req('DELETE', `/v1/jobs/${id}`, { key: free.key })
  await Promise.all([b.closed, d.closed])
  t.equal(b.events[b.events.length - 1].event, 'done')
  t.equal(s.app.services.sse.openStreams(free.id), 0)
})

t.test('a real EventSource client (npm eventsource) with a ticket sees status, progress and done', async (t) => {
  const id = await imageJob(u.key)
  const { ticket } = (await s.req('POST', '/v1/sse/tickets', { key: u.key, body: { jobId: id } })).body
  const seen: Array<{ type: string; data: any }> = []
  await new Promise<void>((resolve, reject) => {
    const es = new EventSource(`${s.url}/v1/sse/jobs/${id}?ticket=${encodeURIComponent(ticket)}`)
    const timer = setTimeout(() => { es.close(); reject(new Error('no done within 10 s')) }, 10_000)
    es.addEventListener('status', (e: any) => seen.push({ type: 'status', data: JSON.parse(e.data) }))
    es.addEventListener('done', (e: any) => { seen.push({ type: 'done', data: JSON.parse(e.data) }); clearTimeout(timer); es.close(); resolve() })
    es.onerror = () => {}
  })
  t.ok(seen.some(e => e.type === 'status' && e.data.status === 'completed'))
  t.equal(seen[seen.length - 1].type, 'done')
})
