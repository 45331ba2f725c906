// The credential caches are bounded in bytes (AUTH_CACHE_MB), least recently loaded
// out first, and their accounting does not under-count the heap they take.
import t from 'tap'
import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { Authenticator, hashEntryBytes, keyEntryBytes, accountEntryBytes } from '../../src/http/auth.js'
import { MemoryLoginThrottle } from '../../src/http/login-throttle.js'
import { ByteLru, stringBytes } from '../../src/util/byte-lru.js'
import { fakeSql, fill, keyRoute, rawKey } from '../fixtures/auth-fill.js'

const MB = 1024 * 1024
const child = fileURLToPath(new URL('../fixtures/auth-cache-heap.js', import.meta.url))

t.test('ByteLru: the budget holds, replacements count once, oldest set goes first, an oversized entry is not kept', async (t) => {
  const c = new ByteLru<string, string>(1000, (k, v) => stringBytes(k) + stringBytes(v))
  c.set('a', 'x'.repeat(100))
  c.set('a', 'x'.repeat(200))
  t.equal(c.bytes, stringBytes('a') + stringBytes('x'.repeat(200)))
  for (let i = 0; i < 20; i++) c.set(`k${i}`, 'y'.repeat(100))
  t.ok(c.bytes <= 1000, `${c.bytes} <= 1000`)
  t.notOk(c.has('a'), 'oldest out')
  t.ok(c.has('k19'), 'newest kept')
  c.set('big', 'z'.repeat(2000))
  t.notOk(c.has('big'), 'larger than the budget: not kept')
  t.ok(c.has('k19'), 'and nothing else evicted for it')
  t.equal(stringBytes('漢'.repeat(8)), 32, 'two bytes a character beyond Latin-1')
  t.equal(stringBytes('é'.repeat(8)), 24, 'one byte a Latin-1 character')
})

t.test('20,000 keys of accounts with 254-character emails: every cache stays within its share of a 1 MB budget', async (t) => {
  const counter = { queries: 0 }
  const auth = new Authenticator(fakeSql(254, counter), 'x'.repeat(32), 'admin-token', 3_600_000, MB)
  await fill(auth, 20_000)
  const s = auth.cacheSizes
  t.comment(`${s.keys} keys, ${s.accounts} accounts, ${s.hashes} hashes, ${s.bytes} bytes`)
  t.ok(s.bytes <= MB, `${s.bytes} bytes <= 1 MB`)
  const perKey = keyEntryBytes('0'.repeat(64), { v: { id: 1, accountId: 1, scopes: ['generate', 'read'], expiresAt: null, revoked: false }, at: 0 })
  t.ok(s.keys <= MB / 2 / perKey && s.keys > MB / 2 / perKey - 2, `keys fill their half: ${s.keys}`)
  const perAccount = accountEntryBytes(1, { v: { id: 1, email: 'x'.repeat(254), banned: false, hasPurchased: true, enterprise: false, emailVerified: true, creditsLocked: false, passwordChangedAtMs: null }, at: 0 })
  t.ok(s.accounts <= MB / 4 / perAccount, `accounts within their quarter: ${s.accounts}`)
  t.ok(s.hashes <= MB / 4 / hashEntryBytes(rawKey(0), '0'.repeat(64)), `hashes within their quarter: ${s.hashes}`)
  // The most recent key is a hit (no query); the first one was evicted (queried again).
  const before = counter.queries
  await auth.authenticate(keyRoute, { 'x-api-key': rawKey(19_999) }, new URLSearchParams())
  t.equal(counter.queries, before, 'the newest key is served from the cache')
  t.ok(auth.fastCaller(keyRoute, rawKey(19_999), ''), 'and through the fast path')
  await auth.authenticate(keyRoute, { 'x-api-key': rawKey(0) }, new URLSearchParams())
  t.ok(counter.queries > before, 'the oldest was evicted and is loaded again')
})

t.test('the in-process login throttle is bounded in bytes', async (t) => {
  const m = new MemoryLoginThrottle(MB)
  const now = Date.now()
  for (let i = 0; i < 20_000; i++) await m.failed(`${i}@`.padEnd(250, 'e') + '.com', `10.0.${i >> 8}.${i & 255}`, now)
  t.ok(m.bytes <= MB, `${m.bytes} bytes <= 1 MB (${m.size} entries)`)
  t.ok(m.size < 20_000 * 2, 'old failures evicted')
  t.ok(await m.check(`${19_999}@`.padEnd(250, 'e') + '.com', '1.1.1.1', now) === 0, 'a recent entry is still answered (below threshold)')
})

interface HeapFill { heap: number; cacheBytes: number; keys: number; accounts: number; hashes: number }
function heap (budgetMb: number, count: number, emailChars: number): Promise<HeapFill> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--expose-gc', child, String(budgetMb), String(count), String(emailChars)], { maxBuffer: 1 << 20 }, (err, stdout) => {
      if (err) reject(err); else resolve(JSON.parse(stdout))
    })
  })
}

t.test('heap: 60,000 credentials with 254-character emails stay under a 4 MB budget, and the estimate covers the heap', async (t) => {
  const r = await heap(4, 60_000, 254)
  t.comment(`budget 4 MB: heap +${(r.heap / MB).toFixed(2)} MB, accounted ${(r.cacheBytes / MB).toFixed(2)} MB; ${r.keys} keys, ${r.accounts} accounts, ${r.hashes} hashes`)
  t.ok(r.cacheBytes <= 4 * MB, 'accounting within budget')
  t.ok(r.heap <= 4 * MB * 1.1, `heap growth ${(r.heap / MB).toFixed(2)} MB <= budget (+10%)`)
  t.ok(r.keys < 60_000, 'evicted')
})

t.test('heap: without a budget to speak of, the same fill grows with the count (the test can fail)', async (t) => {
  const r = await heap(1024, 20_000, 254)
  t.comment(`20,000 credentials unbounded: heap +${(r.heap / MB).toFixed(2)} MB, accounted ${(r.cacheBytes / MB).toFixed(2)} MB`)
  t.equal(r.keys, 20_000)
  t.ok(r.heap > 4 * MB * 1.1, 'far above the 4 MB budget')
  t.ok(r.heap <= r.cacheBytes * 1.05, `measured ${Math.round(r.heap / r.keys)} B/credential <= estimated ${Math.round(r.cacheBytes / r.keys)} B/credential (+5%)`)
})
