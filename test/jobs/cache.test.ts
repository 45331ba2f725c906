// The job read cache is bounded in bytes: filled with jobs whose prompts are
// 10,000 CJK characters, its heap stays under its JOB_CACHE_MB budget (v8 heap statistics
// plus Buffer memory after gc, in a child process run with --expose-gc), and so does its own accounting.
import t from 'tap'
import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { JobCache, entryBytes } from '../../src/jobs/cache.js'
import { startServer } from '../helpers/server.js'

const child = fileURLToPath(new URL('../fixtures/cache-heap.js', import.meta.url))
const MB = 1024 * 1024

function fill (budgetMb: number, count: number): Promise<{ heap: number; cacheBytes: number; size: number }> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--expose-gc', child, String(budgetMb), String(count)], { maxBuffer: 1 << 20 }, (err, stdout) => {
      if (err) reject(err); else resolve(JSON.parse(stdout))
    })
  })
}

t.test('3,000 jobs with 10,000-character CJK prompts: heap and accounting stay under a 16 MB budget', async (t) => {
  const r = await fill(16, 3000)
  t.comment(`budget 16 MB: heap +${(r.heap / MB).toFixed(1)} MB, accounted ${(r.cacheBytes / MB).toFixed(1)} MB, ${r.size} entries kept of 3000`)
  t.ok(r.cacheBytes <= 16 * MB, 'accounting within budget')
  t.ok(r.heap <= 16 * MB * 1.1, `heap growth ${(r.heap / MB).toFixed(1)} MB <= budget (+10%)`)
  t.ok(r.size < 3000 && r.size > 200, 'evicts oldest, keeps a useful number')
  // The accounting does not under-count: measured heap per entry <= estimated bytes per entry.
  t.ok(r.heap / r.size <= r.cacheBytes / r.size * 1.05, `measured ${Math.round(r.heap / r.size)} B/entry <= estimated ${Math.round(r.cacheBytes / r.size)} B/entry`)
})

t.test('without a byte budget the same jobs take what the old count-only bound allowed', async (t) => {
  const r = await fill(1_000_000, 600)
  t.comment(`unbounded by bytes: heap +${(r.heap / MB).toFixed(1)} MB for 600 entries (${Math.round(r.heap / 600)} B each; the old 200,000-entry cap would be ${(r.heap / 600 * 200_000 / 1024 ** 3).toFixed(1)} GB)`)
  t.ok(r.heap > 600 * 20_000, 'each entry costs > 20 KB of heap: a count bound alone is not a memory bound')
})

t.test('accounting follows replacements, fills and drops', async (t) => {
  const c = new JobCache(10_000)
  const v = (id: string, prompt: string, status: any = 'processing', updated = '2026-01-01T00:00:00Z') => ({ id, status, type: 'image', model: 'm', prompt, progress: 0, credits_charged: 1, credits_refunded: 0, estimated_seconds: 1, result_url: null, error_message: null, content_policy_violation: false, created_at: updated, updated_at: updated, completed_at: null }) as any
  c.update(1, v('a', 'x'.repeat(1000)))
  c.update(1, v('a', 'x'.repeat(2000)))
  t.equal(c.bytes, entryBytes(v('a', 'x'.repeat(2000))), 'a replaced entry is counted once')
  c.fill(2, v('b', '漢'.repeat(100), 'processing', '2026-01-02T00:00:00Z'))
  t.equal(c.size, 2)
  c.dropActive(a => a === 2)
  t.equal(c.size, 1)
  t.equal(c.bytes, entryBytes(v('a', 'x'.repeat(2000))))
  for (let i = 0; i < 20; i++) c.update(1, v(`z${i}`, 'y'.repeat(1000)))
  t.ok(c.bytes <= 10_000, `over budget evicts (${c.bytes} bytes, ${c.size} entries)`)
  t.notOk(c.get('a'), 'oldest went first')
})

t.test('JOB_CACHE_MB configures the service cache', async (t) => {
  const s = await startServer(t, { JOB_CACHE_MB: '3' })
  t.equal(s.config.jobCacheMb, 3)
  const c = s.app.services.jobs
  for (let i = 0; i < 400; i++) c.update(1, { id: `job_x${i}`, status: 'completed', type: 'image', model: 'm', prompt: '字'.repeat(10_000), progress: 100, credits_charged: 1, credits_refunded: 0, estimated_seconds: 1, result_url: null, error_message: null, content_policy_violation: false, created_at: '', updated_at: '', completed_at: null })
  t.ok(c.bytes <= 3 * MB, `${c.bytes} bytes <= 3 MB`)
})

t.test('the credential cache is bounded: a flood of unknown keys (each a cached miss) stays within its byte budget', async (t) => {
  const { Authenticator } = await import('../../src/http/auth.js')
  const { KEY_PREFIX } = await import('../../src/http/api-key.js')
  const { randomBytes } = await import('node:crypto')
  const s = await startServer(t)
  const auth = new Authenticator(s.app.services.sql, 'x'.repeat(32), 'admin-token', 5000, 40_000) // keys: 20,000 bytes, ~50 misses
  let refused = 0
  for (let i = 0; i < 200; i++) {
    await auth.authenticate({ auth: 'key' } as any, { 'x-api-key': KEY_PREFIX + randomBytes(32).toString('hex') }, new URLSearchParams())
      .catch((e: any) => { if (e.code === 'INVALID_API_KEY') refused++ })
  }
  t.equal(refused, 200, 'every unknown key refused')
  t.ok(auth.cacheSizes.bytes <= 40_000 && auth.cacheSizes.keys < 200, `${auth.cacheSizes.keys} cached keys, ${auth.cacheSizes.bytes} bytes <= 40,000`)
})

t.test('views of jobs in flight as they cross from a shard: one compact copy each (no property array, shared status, type and model)', async (t) => {
  const child = fileURLToPath(new URL('../fixtures/cache-inflight-heap.js', import.meta.url))
  const r = await new Promise<{ perJob: number; size: number }>((resolve, reject) => {
    execFile(process.execPath, ['--expose-gc', child, '20000'], (err, stdout) => { if (err) reject(err); else resolve(JSON.parse(stdout)) })
  })
  t.comment(`heap per cached in-flight job: ${r.perJob.toFixed(0)} B`)
  t.equal(r.size, 20_000)
  // As received (a structured clone's object, its own copies of every string): about 540 B.
  t.ok(r.perJob <= 450, `${r.perJob.toFixed(0)} B a cached view <= 450`)
})

t.test('a cached view is the view it was given, field for field and in the same key order', async (t) => {
  const c = new JobCache()
  const v = { id: 'job_0000000000000001', status: 'submitted', type: 'video', model: 'seedance-2', prompt: 'p', progress: 0, credits_charged: 220, credits_refunded: 0, estimated_seconds: 350, result_url: null, error_message: null, content_policy_violation: false, created_at: '2026-01-01T00:00:00.000Z', updated_at: '2026-01-01T00:00:00.000Z', completed_at: null } as const
  c.update(3, structuredClone(v) as any)
  t.equal(JSON.stringify(c.get(v.id)!.view), JSON.stringify(v))
  c.fill(3, structuredClone({ ...v, status: 'processing', updated_at: '2026-01-01T00:00:05.000Z' }) as any)
  t.equal(JSON.stringify(c.get(v.id)!.view), JSON.stringify({ ...v, status: 'processing', updated_at: '2026-01-01T00:00:05.000Z' }), 'a newer view read from PostgreSQL replaces it')
})
