import t from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import { connect } from 'node:net'
import type { Readable } from 'node:stream'
import { parseRange } from '../../src/http/routes/files.js'
import { startServer } from '../helpers/server.js'
import { mp4 } from '../fixtures/media.js'
import { settled } from '../helpers/wait.js'

// One front end: a test below watches the main thread's storage reads (with TEST_FRONTENDS=2 the
// download could be served by the other thread).
const s = await startServer(t, { FRONTENDS: '1' })
const storage = s.app.services.storage

const small = Buffer.concat([mp4(1000), randomBytes(200)])
const smallKey = 'results/2026/test/clip.mp4'
await storage.put(smallKey, small, 'video/mp4')
const head = await storage.head(smallKey)

/** A raw HTTP/1.1 GET (fetch normalises `..` away, so path tricks need a socket). */
function rawGet (path: string): Promise<string> {
  const u = new URL(s.url)
  return new Promise((resolve, reject) => {
    const sock = connect(Number(u.port), u.hostname)
    let got = ''
    sock.on('data', (d) => {
      got += d.toString('latin1')
      const m = /content-length: (\d+)\r\n/i.exec(got)
      const at = got.indexOf('\r\n\r\n')
      if (m && at >= 0 && got.length >= at + 4 + Number(m[1])) sock.end()
    })
    sock.on('close', () => resolve(got))
    sock.on('error', reject)
    sock.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)
    setTimeout(() => sock.destroy(), 5000).unref()
  })
}

t.test('a stored file is served with Content-Type, Content-Length, ETag and long cache headers', async (t) => {
  const r = await fetch(`${s.url}/files/${smallKey}`)
  t.equal(r.status, 200)
  t.equal(r.headers.get('content-type'), 'video/mp4')
  t.equal(r.headers.get('content-length'), String(small.length))
  t.equal(r.headers.get('etag'), head!.etag)
  t.match(r.headers.get('etag'), /^"[^"]+"$/, 'a strong, quoted ETag')
  t.equal(r.headers.get('cache-control'), 'public, max-age=31536000, immutable')
  t.equal(r.headers.get('accept-ranges'), 'bytes')
  t.equal(r.headers.get('x-content-type-options'), 'nosniff')
  t.ok(r.headers.get('last-modified'), 'Last-Modified')
  t.ok(r.headers.get('x-request-id'), 'the usual X-Request-Id')
  t.same(Buffer.from(await r.arrayBuffer()), small)
})

t.test('If-None-Match with the ETag answers 304 without a body', async (t) => {
  const r = await fetch(`${s.url}/files/${smallKey}`, { headers: { 'if-none-match': head!.etag } })
  t.equal(r.status, 304)
  t.equal(r.headers.get('etag'), head!.etag)
  t.equal(r.headers.get('cache-control'), 'public, max-age=31536000, immutable')
  t.equal((await r.arrayBuffer()).byteLength, 0)
  const list = await fetch(`${s.url}/files/${smallKey}`, { headers: { 'if-none-match': `"other", W/${head!.etag}` } })
  t.equal(list.status, 304, 'weak comparison over a list')
  const other = await fetch(`${s.url}/files/${smallKey}`, { headers: { 'if-none-match': '"something-else"' } })
  t.equal(other.status, 200, 'a different tag gets the body')
  await other.arrayBuffer()
})

t.test('Range bytes=0-99 answers 206 with Content-Range and those bytes', async (t) => {
  const r = await fetch(`${s.url}/files/${smallKey}`, { headers: { range: 'bytes=0-99' } })
  t.equal(r.status, 206)
  t.equal(r.headers.get('content-range'), `bytes 0-99/${small.length}`)
  t.equal(r.headers.get('content-length'), '100')
  t.equal(r.headers.get('content-type'), 'video/mp4')
  t.same(Buffer.from(await r.arrayBuffer()), small.subarray(0, 100))
})

t.test('a suffix range bytes=-100 answers the last 100 bytes', async (t) => {
  const r = await fetch(`${s.url}/files/${smallKey}`, { headers: { range: 'bytes=-100' } })
  t.equal(r.status, 206)
  t.equal(r.headers.get('content-range'), `bytes ${small.length - 100}-${small.length - 1}/${small.length}`)
  t.same(Buffer.from(await r.arrayBuffer()), small.subarray(small.length - 100))
})

t.test('an open-ended range bytes=100- answers from byte 100 to the end', async (t) => {
  const r = await fetch(`${s.url}/files/${smallKey}`, { headers: { range: 'bytes=100-' } })
  t.equal(r.status, 206)
  t.equal(r.headers.get('content-range'), `bytes 100-${small.length - 1}/${small.length}`)
  t.equal(r.headers.get('content-length'), String(small.length - 100))
  t.same(Buffer.from(await r.arrayBuffer()), small.subarray(100))
})

t.test('a range past the end answers 416 with Content-Range bytes */size', async (t) => {
  for (const range of [`bytes=${small.length}-`, `bytes=${small.length + 10}-${small.length + 20}`, 'bytes=-0']) {
    const r = await fetch(`${s.url}/files/${smallKey}`, { headers: { range } })
    t.equal(r.status, 416, range)
    t.equal(r.headers.get('content-range'), `bytes */${small.length}`)
    await r.arrayBuffer()
  }
})

t.test('an end past the size is clamped; several ranges or a stale If-Range get the whole file', async (t) => {
  const clamp = await fetch(`${s.url}/files/${smallKey}`, { headers: { range: `bytes=10-${small.length + 1000}` } })
  t.equal(clamp.status, 206)
  t.equal(clamp.headers.get('content-range'), `bytes 10-${small.length - 1}/${small.length}`)
  await clamp.arrayBuffer()
  const multi = await fetch(`${s.url}/files/${smallKey}`, { headers: { range: 'bytes=0-9,20-29' } })
  t.equal(multi.status, 200)
  t.equal((await multi.arrayBuffer()).byteLength, small.length)
  const stale = await fetch(`${s.url}/files/${smallKey}`, { headers: { range: 'bytes=0-9', 'if-range': '"old"' } })
  t.equal(stale.status, 200)
  await stale.arrayBuffer()
  const fresh = await fetch(`${s.url}/files/${smallKey}`, { headers: { range: 'bytes=0-9', 'if-range': head!.etag } })
  t.equal(fresh.status, 206)
  await fresh.arrayBuffer()
})

t.test('parseRange follows RFC 9110', async (t) => {
  t.same(parseRange('bytes=0-0', 10), { start: 0, end: 0 })
  t.same(parseRange('bytes=-20', 10), { start: 0, end: 9 }, 'a suffix longer than the file is the whole file')
  t.equal(parseRange('bytes=5-2', 10), null, 'last < first is invalid: ignored')
  t.equal(parseRange('items=0-5', 10), null, 'other units ignored')
  t.equal(parseRange('bytes=abc', 10), null)
  t.equal(parseRange('bytes=0-', 0), 'unsatisfiable', 'nothing is satisfiable in an empty file')
})

t.test('an unknown key answers 404 NOT_FOUND in the error envelope', async (t) => {
  const r = await fetch(`${s.url}/files/results/nope.mp4`)
  t.equal(r.status, 404)
  const body = await r.json() as any
  t.equal(body.error, true)
  t.equal(body.code, 'NOT_FOUND')
})

t.test('path traversal and storage internals are refused with 404', async (t) => {
  for (const p of [
    '/files/../package.json',
    '/files/../../etc/passwd',
    '/files/results/../../package.json',
    '/files/%2e%2e/package.json',
    '/files/results/%2e%2e%2f%2e%2e%2fpackage.json',
    '/files/results%2F..%2F..%2Fpackage.json',
    '/files//etc/passwd',
    '/files/%2Fetc%2Fpasswd',
    `/files/${smallKey}.meta`,
    '/files/results/%E0%A4%A',
    '/files/',
  ]) {
    const reply = await rawGet(p)
    t.match(reply, /^HTTP\/1\.1 404 /, `${p} -> 404`)
    t.notMatch(reply, /"name"\s*:\s*"genjobs"|root:/, `${p} leaks nothing`)
  }
})

t.test('a large file streams whole and intact under backpressure', async (t) => {
  const big = randomBytes(12 * 1024 * 1024)
  await storage.put('results/big.bin', big, 'application/octet-stream')
  const r = await fetch(`${s.url}/files/results/big.bin`)
  t.equal(r.status, 200)
  t.equal(r.headers.get('content-length'), String(big.length))
  const got = Buffer.from(await r.arrayBuffer())
  t.equal(got.length, big.length)
  t.equal(createHash('sha256').update(got).digest('hex'), createHash('sha256').update(big).digest('hex'))
  const part = await fetch(`${s.url}/files/results/big.bin`, { headers: { range: 'bytes=5000000-9999999' } })
  t.equal(part.status, 206)
  t.ok(Buffer.from(await part.arrayBuffer()).equals(big.subarray(5000000, 10000000)), 'a large range is exact')
})

t.test('a client that goes away mid-download stops the file read', async (t) => {
  const big = randomBytes(24 * 1024 * 1024)
  await storage.put('results/abort.bin', big, 'application/octet-stream')
  const realRead = storage.read.bind(storage)
  let opened: Readable | null = null
  storage.read = async (key, range) => { const st = await realRead(key, range); opened = st; return st }
  t.teardown(() => { storage.read = realRead })

  const u = new URL(s.url)
  await new Promise<void>((resolve) => {
    const sock = connect(Number(u.port), u.hostname)
    let got = 0
    sock.on('data', (d) => {
      got += d.length
      // Read a little, then stop reading and hang up: the server must not keep reading the file.
      if (got > 64 * 1024) { sock.destroy(); resolve() }
    })
    sock.on('error', () => resolve())
    sock.write('GET /files/results/abort.bin HTTP/1.1\r\nHost: x\r\n\r\n')
  })
  await settled(() => (opened as Readable | null)?.destroyed, d => d === true, { timeoutMs: 2000, everyMs: 20 })
  t.ok(opened, 'the file was opened')
  t.equal((opened as Readable | null)?.destroyed, true, 'the file stream was destroyed after the abort')
  const again = await fetch(`${s.url}/files/${smallKey}`)
  t.equal(again.status, 200, 'the server keeps serving')
  await again.arrayBuffer()
})

t.test('an empty file is served with Content-Length 0', async (t) => {
  await storage.put('results/empty.txt', Buffer.alloc(0), 'text/plain')
  const r = await fetch(`${s.url}/files/results/empty.txt`)
  t.equal(r.status, 200)
  t.equal(r.headers.get('content-length'), '0')
  t.equal((await r.arrayBuffer()).byteLength, 0)
})
