/**
 * The local webhook receiver of the `webhooks` scenario, in its own process. It reads each
 * POST body, parses it, counts deliveries by X-Service-Delivery (duplicates are deliveries seen
 * before) and answers 200. In `hold` mode answers are held until `release`, so the service's
 * outbox fills with due rows and the scenario times how fast the delivery pool drains them.
 * A held answer is given after HOLD_MAX_MS at the latest (a slow receiver, not a dead one). The
 * pool sends at most 16 requests at a time to one origin and queues the rest of its 64 in
 * flight; a queued request's 10 s timeout runs while it waits, so 4 waves of 2 s stay inside it
 * and nothing is retried because of the hold.
 * IPC commands: reset {mode, expect, capture}, release, go, stats, samples.
 */
import { createServer, type ServerResponse } from 'node:http'

let mode: 'open' | 'hold' = 'open'
let expect = 0
let capture = 0
let held: ServerResponse[] = []
/** A held answer is given anyway after this long (see above). */
const HOLD_MAX_MS = 2000
let uniqueAtRelease = 0
let seen = new Set<string>()
let jobs = new Set<string>()
let received = 0
let badBodies = 0
let startAt = 0
let firstAt = 0
let doneAt = 0
let lastAt = 0
let samples: Array<{ headers: Record<string, string>; body: string }> = []

const KEEP = ['content-type', 'user-agent', 'x-service-signature', 'x-service-event', 'x-service-delivery']

const server = createServer((req, res) => {
  const chunks: Buffer[] = []
  req.on('data', (c: Buffer) => chunks.push(c))
  req.on('end', () => {
    const body = Buffer.concat(chunks).toString('utf8')
    received++
    const now = performance.now()
    if (firstAt === 0) firstAt = now
    lastAt = now
    let jobId = ''
    try { jobId = JSON.parse(body)?.data?.job?.id ?? '' } catch { badBodies++ }
    const delivery = String(req.headers['x-service-delivery'] ?? '')
    if (delivery && !seen.has(delivery)) {
      seen.add(delivery)
      if (jobId) jobs.add(jobId)
      if (seen.size === expect) doneAt = now
    }
    if (samples.length < capture) {
      const h: Record<string, string> = {}
      for (const k of KEEP) if (typeof req.headers[k] === 'string') h[k] = req.headers[k] as string
      samples.push({ headers: h, body })
    }
    if (mode === 'hold') {
      held.push(res)
      setTimeout(() => { if (!res.writableEnded) res.writeHead(200, { 'content-type': 'text/plain' }).end('ok') }, HOLD_MAX_MS).unref()
      return
    }
    res.writeHead(200, { 'content-type': 'text/plain' }).end('ok')
  })
})
server.keepAliveTimeout = 30_000

process.on('message', (m: any) => {
  const reply = (v: Record<string, unknown> = {}) => process.send!({ id: m.id, ...v })
  switch (m?.cmd) {
    case 'reset':
      mode = m.mode ?? 'open'; expect = m.expect ?? 0; capture = m.capture ?? 0
      held = []; uniqueAtRelease = 0; seen = new Set(); jobs = new Set(); received = 0; badBodies = 0
      startAt = performance.now(); firstAt = 0; doneAt = 0; lastAt = 0; samples = []
      if (expect === 0) doneAt = startAt
      return reply()
    case 'go': startAt = performance.now(); return reply()
    case 'release': {
      startAt = performance.now()
      mode = 'open'
      const h = held
      held = []
      uniqueAtRelease = seen.size
      for (const r of h) if (!r.writableEnded) r.writeHead(200, { 'content-type': 'text/plain' }).end('ok')
      return reply({ released: h.length })
    }
    case 'stats':
      return reply({
        received, unique: seen.size, uniqueAtRelease, duplicates: received - seen.size, jobs: jobs.size, badBodies, held: held.length,
        done: doneAt > 0, spanMs: doneAt > 0 ? doneAt - startAt : null, lastAfterStartMs: lastAt > 0 ? lastAt - startAt : null,
        firstAfterStartMs: firstAt > 0 ? firstAt - startAt : null
      })
    case 'samples': return reply({ samples })
  }
})
server.listen(Number(process.env.PORT), '127.0.0.1', () => process.send!({ type: 'ready' }))
process.on('SIGTERM', () => { server.closeAllConnections(); server.close(() => process.exit(0)) })
