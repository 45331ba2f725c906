/**
 * The JavaScript of the GET /v1/jobs/{id} answer from memory (src/http/server.ts fromMemory) measured
 * alone: npm run build && node dist/bench/fastread.js [--requests N]
 *
 * The real HttpServer handler, Authenticator (caches filled), JobCache, RateLimiter, Metering
 * (columns; the flush is a no-op here) and Metrics, called with stand-in uWS request and
 * response objects that answer at once: what is measured is the handler's own work, not uWS's
 * parse, header crossings and send (bench job-get's bare uWS baseline shows those). 100 keys,
 * 1000 cached jobs, as job-get. Figures: ns per request (best of 5 runs) and the young-
 * generation collections per 10,000 requests.
 */
import { PerformanceObserver } from 'node:perf_hooks'
import { pino } from 'pino'
import { HttpServer } from '../src/http/server.js'
import { HEADER_NAMES } from '../src/http/fast-headers.js'
import { Authenticator } from '../src/http/auth.js'
import { generateKey } from '../src/http/api-key.js'
import { JobCache } from '../src/jobs/cache.js'
import { RateLimiter } from '../src/http/rate-limit.js'
import { Metering } from '../src/metering.js'
import { Metrics } from '../src/metrics.js'
import { routes } from '../src/http/routes/jobs.js'
import type { Services } from '../src/services.js'
import type { JobView } from '../src/jobs/view.js'

const i = process.argv.indexOf('--requests')
const N = i > 0 ? Number(process.argv[i + 1]) : 1_000_000
const log = pino({ level: 'warn' })
const sql = { begin: async () => {} } as unknown as ConstructorParameters<typeof Authenticator>[0]
const auth = new Authenticator(sql, 'x'.repeat(40), 'admin-token-0123456789', 3_600_000)
const jobs = new JobCache()
const now = Date.now()
const reqs: Array<{ key: string; id: string; url: string }> = []
for (let k = 0; k < 100; k++) {
  const { key, hash } = generateKey()
  const internals = auth as unknown as { keys: Map<string, unknown>; accounts: Map<number, unknown> }
  internals.keys.set(hash, { v: { id: k + 1, accountId: k + 1, scopes: ['generate', 'read'], expiresAt: null, revoked: false }, at: now })
  internals.accounts.set(k + 1, {
    v: { id: k + 1, email: `a${k}@x`, banned: false, hasPurchased: true, enterprise: false, emailVerified: true, creditsLocked: false, passwordChangedAtMs: null },
    at: now,
  })
  for (let j = 0; j < 10; j++) {
    const id = `job_${String(k * 10 + j).padStart(16, '0')}`
    const t = new Date(now).toISOString()
    const view: JobView = {
      id, status: 'completed', type: 'image', model: 'nano-banana', prompt: 'a lighthouse at dawn (bench job-get)', progress: 100, credits_charged: 10,
      credits_refunded: 0, estimated_seconds: 15, result_url: `https://files.example/${id}.png`, error_message: null, content_policy_violation: false,
      created_at: t, updated_at: t, completed_at: t,
    }
    jobs.update(k + 1, view)
    reqs.push({ key, id, url: `/v1/jobs/${id}` })
  }
}
const metering = new Metering(sql, log, auth.lastUsed, 30, 3_600_000)
const services = {
  config: { tierLimits: { free: { rpm: 1e9 }, pro: { rpm: 1e9 }, enterprise: { rpm: 1e9 } } },
  auth, jobs, limiter: new RateLimiter(), redisLimiter: null, metering, log, metrics: new Metrics(),
} as unknown as Services
const route = routes.find(r => r.method === 'GET' && r.path === '/v1/jobs/:id')!
const server = new HttpServer(services, [route])
// The handler as uWS would call it: registered again on a recording stand-in of the App.
let handler: ((res: unknown, req: unknown) => void) | undefined
const s = server as unknown as { app: unknown; register: (r: typeof route) => void }
s.app = { get: (_p: string, h: typeof handler) => { handler ??= h }, head: () => {} }
s.register(route)
;(server as unknown as { handle: () => void }).handle = () => { throw new Error('left the fast path') }

let cur = reqs[0]
let bytes = 0
// uWS hands every header and parameter over as a new string: so does the stand-in (the
// handler's hash lookups then work on strings they have not seen, as in the service).
const scratch = Buffer.alloc(256)
const fresh = (s: string) => scratch.toString('latin1', 0, scratch.write(s, 0, 'latin1'))
const req = {
  getQuery: () => undefined,
  // The service passes header names as bytes (src/http/fast-headers.ts HEADER_NAMES).
  getHeader: (h: unknown) => h === HEADER_NAMES.apiKey ? fresh(cur.key) : h === HEADER_NAMES.accept ? fresh('*/*') : '',
  getParameter: () => fresh(cur.id),
  getUrl: () => cur.url,
}
const res = {
  writeHeader (_k: unknown, v: string | Uint8Array) { bytes += v.length; return res },
  end (b: Buffer) { bytes += b.length; return res },
  endWithoutBody () { return res },
  onAborted () { return res },
  writeStatus () { return res },
  cork (f: () => void) { f(); return res },
}
let scavenges = 0
new PerformanceObserver((l) => { for (const e of l.getEntries()) if ((e as { detail?: { kind?: number } }).detail?.kind === 1) scavenges++ }).observe({ entryTypes: ['gc'] })

function run (n: number): number {
  const t0 = performance.now()
  for (let k = 0; k < n; k++) {
    cur = reqs[k % reqs.length]
    handler!(res, req)
    if (metering.pending >= 4000) (metering as unknown as { buf: { reset: () => void } }).buf.reset() // no flush: the rows are dropped
  }
  return (performance.now() - t0) * 1e6 / n
}
run(200_000) // warm-up (optimised code)
const full0 = scavenges
let best = Infinity
for (let r = 0; r < 5; r++) best = Math.min(best, run(N))
await new Promise(resolve => setTimeout(resolve, 100)) // gc entries are delivered asynchronously
console.log(`fast path JS: ${best.toFixed(0)} ns/request (best of 5 x ${N}); ${((scavenges - full0) * 10_000 / (5 * N)).toFixed(2)} scavenges per 10,000 requests; ${bytes > 0 ? 'answered' : 'NOT answered'}`)
process.exit(0)
