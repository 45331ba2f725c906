// Capacity and request budgets at the provider (docs/providers.md "Capacity and budgets"): two
// nodes on one database and one Redis send to one Replicate contract stub through a proxy that
// timestamps every API request. The stub's own job records give the jobs it held at once.
// - a route's max_concurrent holds across both nodes (it used to be a per-shard share, so two
//   nodes sent twice the load);
// - a provider's requests_per_second holds across both nodes (submits, polls, cancels), and a
//   submit that must wait for its turn waits instead of failing;
// - an upstream 429 lowers the budget for every node;
// - without Redis, a cap holds across the shards of one node.
import { randomBytes } from 'node:crypto'
import { mkdtemp, writeFile } from 'node:fs/promises'
import { createServer as createHttpServer, type Server } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { Redis } from 'ioredis'
import { request } from 'undici'
import { startReplicateStub, type ReplicateStub } from '../fixtures/replicate-stub.js'
import { UNLIMITED_TIERS, dbOf, paidUser, pollJob } from '../helpers/jobs.js'
import { startServer, type TestServer } from '../helpers/server.js'
import { freePort } from '../helpers/net.js'

const REDIS_URL = process.env.REDIS_URL_TEST || process.env.REDIS_URL || 'redis://127.0.0.1:6379'

async function redisUp (): Promise<boolean> {
  const r = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  try { await r.connect(); await r.ping(); return true } catch { return false } finally { r.disconnect() }
}

/** A forwarding proxy in front of the stub's API that notes when each request arrived. */
async function countingProxy (target: string): Promise<{ url: string; seen: Array<{ at: number; method: string; path: string }>; close: () => Promise<void> }> {
  const seen: Array<{ at: number; method: string; path: string }> = []
  const srv: Server = createHttpServer((req, res) => {
    seen.push({ at: Date.now(), method: req.method ?? '', path: req.url ?? '' })
    const chunks: Buffer[] = []
    req.on('data', c => chunks.push(c))
    req.on('end', () => {
      const headers: Record<string, string> = {}
      for (const [k, v] of Object.entries(req.headers)) if (k !== 'host' && k !== 'connection' && typeof v === 'string') headers[k] = v
      request(target + (req.url ?? '/'), { method: req.method as any, headers, body: chunks.length ? Buffer.concat(chunks) : undefined })
        .then(async (r) => {
          const body = Buffer.from(await r.body.arrayBuffer())
          const out: Record<string, string> = {}
          for (const k of ['content-type', 'retry-after']) { const v = r.headers[k]; if (typeof v === 'string') out[k] = v }
          res.writeHead(r.statusCode, out).end(body)
        }, () => { res.writeHead(502).end() })
    })
  })
  await new Promise<void>(resolve => srv.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${(srv.address() as { port: number }).port}`
  return { url, seen, close: () => new Promise<void>(resolve => { srv.closeAllConnections(); srv.close(() => resolve()) }) }
}

/** The most upstream jobs the stub held at once among those whose prompt starts with `tag`. */
function mostAtOnce (rep: ReplicateStub, tag: string): number {
  const ev: Array<[number, number]> = []
  for (const j of rep.jobs.values()) {
    if (typeof j.input?.prompt !== 'string' || !j.input.prompt.startsWith(tag)) continue
    ev.push([j.createdAt, 1], [j.endedAt ?? Number.MAX_SAFE_INTEGER, -1])
  }
  // An end and a start at the same millisecond: the end first (the slot was free).
  ev.sort((a, b) => a[0] - b[0] || a[1] - b[1])
  let n = 0; let most = 0
  for (const [, d] of ev) { n += d; most = Math.max(most, n) }
  return most
}

/** The most requests in any window of `ms`. */
function mostInWindow (times: number[], ms: number): number {
  const s = [...times].sort((a, b) => a - b)
  let best = 0
  for (let i = 0, j = 0; i < s.length; i++) {
    while (s[i] - s[j] >= ms) j++
    best = Math.max(best, i - j + 1)
  }
  return best
}

const rep = await startReplicateStub()
// Every job ends 300 ms after it was created upstream; completion comes by the signed webhook.
rep.defaults = { ...rep.defaults, steps: ['running'], media: 'png', finishAfterMs: 300 }
const proxy = await countingProxy(rep.url)
t.teardown(async () => { await proxy.close(); await rep.close() })

const RPS = 5
const BURST = 2 // the default for 5/s: max(1, ceil(5 / 4))
const dir = await mkdtemp(join(tmpdir(), 'gjt-capacity-'))
const file = join(dir, 'providers.json')
await writeFile(file, JSON.stringify({
  providers: { replicate: { requests_per_second: RPS } },
  routes: {
    'nano-banana': [{ provider: 'replicate', model: 'google/nano-banana', max_concurrent: 2, input: { prompt: '$.prompt' } }],
    'nano-banana-pro': [{ provider: 'replicate', model: 'google/nano-banana-pro', input: { prompt: '$.prompt' } }],
  },
}))
const env = (port: number, extra: Record<string, string> = {}) => ({
  PORT: String(port),
  PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
  SHARDS: '1',
  TIER_LIMITS: UNLIMITED_TIERS,
  PROVIDERS_FILE: file,
  REPLICATE_API_TOKEN: rep.token,
  REPLICATE_API_URL: proxy.url,
  REPLICATE_WEBHOOK_SECRET: rep.secret,
  WEBHOOK_ALLOWLIST: new URL(rep.url).host,
  ...extra,
})

if (!(await redisUp())) {
  t.test('capacity and budgets across two nodes', { skip: `Redis is not reachable at ${REDIS_URL}` }, () => {})
} else {
  const prefix = `gjcap${randomBytes(4).toString('hex')}`
  const pa = await freePort()
  const a = await startServer(t, env(pa, { REDIS_URL, REDIS_PREFIX: prefix }))
  const pb = await freePort()
  const b = await startServer(t, env(pb, { REDIS_URL, REDIS_PREFIX: prefix, DATABASE_URL: a.databaseUrl }))
  const sql = dbOf(t, a)
  const u = await paidUser(a, 100_000)
  const redis = new Redis(REDIS_URL)
  t.teardown(async () => {
    const keys = await redis.keys(`${prefix}:*`)
    if (keys.length) await redis.del(...keys)
    redis.disconnect()
  })

  /** `n` creations alternating between the nodes, all sent at once; resolves with their answers and times. */
  async function burst (model: string, tag: string, n: number) {
    return Promise.all(Array.from({ length: n }, async (_, i) => {
      const started = Date.now()
      const r = await (i % 2 === 0 ? a : b).req('POST', '/v1/generate/image', { key: u.key, body: { model, prompt: `${tag} ${i}` } })
      return { r, ms: Date.now() - started, node: (i % 2 === 0 ? a : b) as TestServer }
    }))
  }

  t.test('a route\'s max_concurrent holds across two nodes: the provider never holds more than 2 of our jobs', async (t) => {
    const tag = `cap-${randomBytes(3).toString('hex')}`
    const out = await burst('nano-banana', tag, 10)
    for (const { r } of out) t.equal(r.status, 201, r.text)
    t.ok(out.some(o => o.r.body.status === 'queued'), 'jobs beyond the cap are queued')
    for (const { r, node } of out) {
      const { job } = await pollJob(node, u, r.body.id, { timeoutMs: 30_000, everyMs: 100 })
      t.equal(job.status, 'completed', `${r.body.id} completed`)
    }
    t.equal(mostAtOnce(rep, tag), 2, 'two upstream jobs at once at most, and the cap was used')
    const [{ n }] = await sql`SELECT count(*)::int AS n FROM credit_entries WHERE kind = 'charge' AND job_id = ANY(${out.map(o => o.r.body.id)})`
    t.equal(n, 10, 'one charge per job')
  })

  t.test('requests_per_second holds across two nodes; submits wait for their turn instead of failing', async (t) => {
    const tag = `rps-${randomBytes(3).toString('hex')}`
    const from = Date.now()
    const out = await burst('nano-banana-pro', tag, 12)
    for (const { r } of out) t.equal(r.status, 201, r.text)
    t.ok(out.every(o => o.r.body.status === 'submitted'), 'every job was submitted within its creation (none queued, none refused)')
    const slowest = Math.max(...out.map(o => o.ms))
    // 12 submits at 5/s with a burst of 2: the last one's turn is about 2 s out.
    t.ok(slowest >= 1500, `the last creation waited for its turn (${slowest} ms)`)
    for (const { r, node } of out) {
      const { job } = await pollJob(node, u, r.body.id, { timeoutMs: 30_000, everyMs: 200 })
      t.equal(job.status, 'completed')
    }
    const sent = proxy.seen.filter(s => s.at >= from).map(s => s.at)
    const most = mostInWindow(sent, 1000)
    // The budget allows RPS x 1 s + BURST; +1 for arrival-time jitter at the proxy.
    t.ok(most <= RPS + BURST + 1, `at most ${most} API requests in any second (budget ${RPS}/s, burst ${BURST})`)
    t.ok(sent.length >= 12, `${sent.length} requests sent`)
  })

  t.test('an upstream 429 on one node lowers the budget on every node for its Retry-After', async (t) => {
    rep.fault({ route: 'submit', status: 429, retryAfter: '3' })
    t.teardown(() => { rep.faults.length = 0 })
    const r = await a.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana-pro', prompt: 'throttled' } })
    t.equal(r.status, 201, r.text)
    t.equal(r.body.status, 'queued', 'the job waits for the provider, charged once')
    const h = await redis.hgetall(`${prefix}:budget:replicate`)
    t.equal(Number(h.factor), 2, 'the budget every node reads is halved')
    t.ok(Number(h.until) - Date.now() > 2000, 'for the Retry-After (3 s)')
    // Node B's next submits are spaced at the lowered rate (2.5/s): 3 of them take at least ~0.8 s.
    const started = Date.now()
    const outs = await Promise.all([0, 1, 2].map(i => b.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana-pro', prompt: `after 429 ${i}` } })))
    for (const o of outs) t.equal(o.status, 201, o.text)
    t.ok(Date.now() - started >= 700, `node B waited for the lowered budget (${Date.now() - started} ms)`)
    const { job } = await pollJob(a, u, r.body.id, { timeoutMs: 30_000, everyMs: 200 })
    t.equal(job.status, 'completed', 'the throttled job was submitted after Retry-After and completed')
  })
}

t.test('without Redis a route\'s cap holds across the shards of one node (not ceil(cap / shards) each)', async (t) => {
  const one = join(dir, 'one.json')
  await writeFile(one, JSON.stringify({ routes: { 'nano-banana': [{ provider: 'replicate', model: 'google/nano-banana', max_concurrent: 1, input: { prompt: '$.prompt' } }] } }))
  const port = await freePort()
  const s = await startServer(t, env(port, { SHARDS: '2', PROVIDERS_FILE: one }))
  const users = [await paidUser(s, 10_000), await paidUser(s, 10_000)]
  t.not(users[0].id % 2, users[1].id % 2, 'the two accounts live on different shards')
  const tag = `shards-${randomBytes(3).toString('hex')}`
  const out = await Promise.all(Array.from({ length: 6 }, (_, i) => s.req('POST', '/v1/generate/image', { key: users[i % 2].key, body: { model: 'nano-banana', prompt: `${tag} ${i}` } })))
  for (const r of out) t.equal(r.status, 201, r.text)
  for (let i = 0; i < out.length; i++) {
    const { job } = await pollJob(s, users[i % 2], out[i].body.id, { timeoutMs: 30_000, everyMs: 100 })
    t.equal(job.status, 'completed')
  }
  t.equal(mostAtOnce(rep, tag), 1, 'one upstream job at a time for the whole node')
})
