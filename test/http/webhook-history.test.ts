// A delivery disabled while its attempt was in flight (another delivery of
// the same webhook answered 410 first) still shows that attempt: attempts and last_status_code
// agree with attempts_history.
import t from 'tap'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { createUser, startServer } from '../helpers/server.js'
import { compile } from '../helpers/contract.js'
import { waitFor } from '../helpers/wait.js'

/** A receiver that holds every request until `n` have arrived, then answers them all 410 at once. */
const held: Array<ServerResponse> = []
const bodies: Array<{ headers: IncomingMessage['headers']; body: string }> = []
let want = 0
let arrived: () => void = () => {}
const rx = createServer((req: IncomingMessage, res: ServerResponse) => {
  let body = ''
  req.setEncoding('utf8')
  req.on('data', (c) => { body += c })
  req.on('end', () => {
    bodies.push({ headers: req.headers, body })
    held.push(res)
    if (held.length >= want) arrived()
  })
})
await new Promise<void>(resolve => rx.listen(0, '127.0.0.1', resolve))
const port = (rx.address() as { port: number }).port
t.teardown(() => new Promise<void>(resolve => { rx.closeAllConnections(); rx.close(() => resolve()) }))

const s = await startServer(t, {
  SIM_SPEED: '1000',
  WEBHOOK_ALLOWLIST: `127.0.0.1:${port}`,
  TIER_LIMITS: '{"free":{"rpm":100000,"max_concurrent":1000}}',
})

t.test('deliveries disabled while in flight show the attempt they made (attempts, last_status_code match attempts_history)', async (t) => {
  const u = await createUser(s, { credits: 1000 })
  const hook = await s.req('POST', '/v1/webhooks', { key: u.key, body: { url: `http://127.0.0.1:${port}/gone`, events: ['job.completed'], secret: 'a-secret-of-twenty-chars' } })
  t.equal(hook.status, 201)
  const N = 3
  want = N
  const all = new Promise<void>(resolve => { arrived = resolve })
  for (let i = 0; i < N; i++) {
    const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana', prompt: `a lantern number ${i}` } })
    t.equal(r.status, 201)
  }
  await all // every delivery is in flight at once
  for (const res of held.splice(0)) res.writeHead(410).end()
  // Wait (on the deliveries' own state) until no delivery is pending any more.
  let list: any
  await waitFor(async () => {
    list = (await s.req('GET', `/v1/webhooks/${hook.body.id}/deliveries`, { key: u.key })).body
    return list.total === N && list.data.every((d: any) => d.status !== 'pending' && d.attempts_history.length > 0)
  }, { what: () => `no delivery pending (last: ${JSON.stringify(list)})`, timeoutMs: 15_000, everyMs: 50 })
  for (const d of list.data) {
    const last = d.attempts_history[d.attempts_history.length - 1]
    t.equal(d.status, 'disabled', `${d.id}: disabled`)
    t.equal(d.attempts, d.attempts_history.length, `${d.id}: attempts ${d.attempts} = history length ${d.attempts_history.length}`)
    t.equal(d.last_status_code, last.status_code, `${d.id}: last_status_code ${d.last_status_code} = last attempt's ${last.status_code}`)
    t.equal(last.status_code, 410)
  }
  const hooks = (await s.req('GET', '/v1/webhooks', { key: u.key })).body.data
  t.equal(hooks.find((w: any) => w.id === hook.body.id).active, false, 'the webhook is disabled')
})

t.test('what the receiver got matches the OpenAPI webhooks section (body schema and X-Service-* headers)', async (t) => {
  t.ok(bodies.length >= 3, `${bodies.length} deliveries received`)
  const doc = (await s.req('GET', '/v1/openapi.json')).body
  const c = compile(doc)
  const check = c.ajv.getSchema('openapi.json#/webhooks/job.completed/post/requestBody/content/application~1json/schema')!
  for (const b of bodies) {
    t.ok(check(JSON.parse(b.body)), `body matches: ${JSON.stringify(check.errors)}`)
    for (const h of doc.webhooks['job.completed'].post.parameters) {
      const v = b.headers[h.name.toLowerCase()]
      t.type(v, 'string', `${h.name} sent`)
      if (h.schema.pattern) t.match(v, new RegExp(h.schema.pattern), `${h.name} has the documented form`)
      if (h.schema.enum) t.ok(h.schema.enum.includes(v), `${h.name} is one of the documented values`)
    }
  }
  t.notOk(check({ id: 'evt_x', type: 'job.completed', created_at: 'yesterday', data: {} }), 'a wrong body is refused by the same schema')
})
