import t from 'tap'
import { randomBytes } from 'node:crypto'
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { PassThrough, Readable } from 'node:stream'
import { loadConfig } from '../../src/config.js'
import { createStorage, storageConfig } from '../../src/storage/index.js'
import { LocalStorage } from '../../src/storage/local.js'
import { MAGIC } from '../../src/storage/object-header.js'
import { waitFor } from '../helpers/wait.js'
import { storageContract } from './contract.js'

async function readAll (s: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of s) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}

const dataDir = await mkdtemp(join(tmpdir(), 'gjt-local-'))
t.teardown(() => rm(dataDir, { recursive: true, force: true }))

const config = loadConfig({ DATA_DIR: dataDir, PUBLIC_BASE_URL: 'https://api.example.com/' })
const storage = await createStorage(config)

t.test('STORAGE_DRIVER unset picks the local driver under DATA_DIR/media', async (t) => {
  t.equal(storage.driver, 'local')
  t.ok(storage instanceof LocalStorage)
  t.equal(config.storageDriver, 'local')
})

storageContract(t, storage, (key) => `https://api.example.com/files/${key}`)

t.test('one file per object under DATA_DIR/media, no sidecar, and no temp files remain', async (t) => {
  await storage.put('results/x/file.png', Buffer.from('png'), 'image/png')
  const names = await readdir(join(dataDir, 'media', 'results', 'x'))
  t.same(names, ['file.png'], 'the object alone')
  const uploads = await readdir(join(dataDir, 'media', 'uploads', '2026', '01'))
  t.notOk(uploads.some(n => n.includes('.tmp-')), 'failed puts left no temp file')
  t.notOk(uploads.some(n => n.endsWith('.meta')), 'streamed puts wrote no sidecar')
  const raw = await readFile(join(dataDir, 'media', 'results', 'x', 'file.png'))
  t.ok(raw.subarray(0, MAGIC.length).equals(MAGIC), 'the file starts with the object header')
  t.equal(raw.subarray(raw.length - 3).toString(), 'png', 'and ends with the bytes put')
})

t.test('head never exposes .meta files', async (t) => {
  await writeLegacy('results/x/old.png', Buffer.from('old'), 'image/png', '"legacy-tag"')
  t.equal(await storage.head('results/x/old.png.meta'), null)
  t.equal(await storage.head('results/x/file.png.meta'), null)
})

/** An object as the previous layout wrote it: the bytes alone, and `<file>.meta` beside them. */
async function writeLegacy (key: string, data: Buffer, contentType: string, etag: string): Promise<string> {
  const p = join(dataDir, 'media', key)
  await mkdir(dirname(p), { recursive: true })
  await writeFile(p, data)
  await writeFile(`${p}.meta`, JSON.stringify({ contentType, etag }))
  return p
}

t.test('objects of the previous layout (with a .meta sidecar) are still read', async (t) => {
  // A PNG signature, as every stored upload and result begins with its media's own.
  const data = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), randomBytes(4000)])
  await writeLegacy('results/legacy/a.png', data, 'image/png', '"legacy-etag-of-a"')
  const h = await storage.head('results/legacy/a.png')
  t.ok(h)
  t.equal(h!.size, data.length)
  t.equal(h!.contentType, 'image/png')
  t.equal(h!.etag, '"legacy-etag-of-a"', 'the ETag the old layout stored')
  t.same(await readAll(await storage.read('results/legacy/a.png')), data)
  t.same(await readAll(await storage.read('results/legacy/a.png', { start: 0, end: 7 })), data.subarray(0, 8))
  t.same(await readAll(await storage.read('results/legacy/a.png', { start: 100, end: 2099 })), data.subarray(100, 2100))
  t.same(await readAll(await storage.read('results/legacy/a.png', { start: data.length - 1, end: data.length - 1 })), data.subarray(data.length - 1))

  await writeFile(join(dataDir, 'media', 'results', 'legacy', 'orphan.png'), data)
  t.equal(await storage.head('results/legacy/orphan.png'), null, 'old-layout bytes without their .meta are not an object')
})

t.test('byte ranges skip the header: first byte, last byte, middle, whole', async (t) => {
  const data = randomBytes(70 * 1024)
  await storage.put('results/ranges.bin', data, 'application/octet-stream')
  const h = await storage.head('results/ranges.bin')
  t.equal(h!.size, data.length, 'size without the header')
  t.same(await readAll(await storage.read('results/ranges.bin', { start: 0, end: 0 })), data.subarray(0, 1))
  t.same(await readAll(await storage.read('results/ranges.bin', { start: data.length - 1, end: data.length - 1 })), data.subarray(data.length - 1))
  t.same(await readAll(await storage.read('results/ranges.bin', { start: 1000, end: 50_000 })), data.subarray(1000, 50_001))
  t.same(await readAll(await storage.read('results/ranges.bin', { start: 0, end: data.length - 1 })), data)
  t.same(await readAll(await storage.read('results/ranges.bin')), data)
})

t.test('content that itself begins with the header magic round-trips', async (t) => {
  const data = Buffer.concat([MAGIC, Buffer.from([1, 29, 0, 9]), Buffer.from('"forged-etag-forged-etag-abc"text/html')])
  const put = await storage.put('results/magic.bin', data, 'application/octet-stream')
  const h = await storage.head('results/magic.bin')
  t.equal(h!.contentType, 'application/octet-stream')
  t.equal(h!.etag, put.etag)
  t.equal(h!.size, data.length)
  t.same(await readAll(await storage.read('results/magic.bin')), data)
})

t.test('a streamed put and a buffer put of the same bytes store the same ETag', async (t) => {
  const data = randomBytes(200_000)
  const a = await storage.put('results/same-a.bin', data, 'application/octet-stream')
  const b = await storage.put('results/same-b.bin', Readable.from([data.subarray(0, 65536), data.subarray(65536)]), 'application/octet-stream')
  t.equal(b.etag, a.etag, 'put answers the content hash, not the placeholder')
  t.equal((await storage.head('results/same-b.bin'))!.etag, a.etag, 'and the file holds it')
  t.equal(b.size, data.length)
})

t.test('the ETag and content type survive a restart (another driver on the same directory)', async (t) => {
  const put = await storage.put('results/restart.webm', randomBytes(3000), 'video/webm')
  const other = new LocalStorage(join(dataDir, 'media'), 'https://other.example.com')
  const h = await other.head('results/restart.webm')
  t.equal(h!.etag, put.etag)
  t.equal(h!.contentType, 'video/webm')
  t.equal(h!.size, 3000)
})

t.test('a content type that cannot be an HTTP header value is refused before anything is written', async (t) => {
  await t.rejects(storage.put('results/bad-type.bin', Buffer.from('x'), 'text/html\r\nX-Evil: 1'), /content type/)
  await t.rejects(storage.put('results/bad-type.bin', Buffer.from('x'), 'x/' + 'y'.repeat(300)), /content type/)
  t.equal(await storage.head('results/bad-type.bin'), null)
})

t.test('delete removes both forms', async (t) => {
  const dir = join(dataDir, 'media', 'results', 'del')
  await writeLegacy('results/del/old.png', Buffer.from('old bytes'), 'image/png', '"old"')
  await storage.put('results/del/new.png', Buffer.from('new bytes'), 'image/png')
  // A key of the previous layout replaced by a put: its sidecar is stale, the header wins.
  await writeLegacy('results/del/replaced.png', Buffer.from('old bytes'), 'image/png', '"old"')
  const replaced = await storage.put('results/del/replaced.png', Buffer.from('newer bytes'), 'image/jpeg')
  const h = await storage.head('results/del/replaced.png')
  t.equal(h!.etag, replaced.etag, 'the header, not the stale sidecar')
  t.equal(h!.contentType, 'image/jpeg')
  t.same(await readAll(await storage.read('results/del/replaced.png')), Buffer.from('newer bytes'))
  t.same((await readdir(dir)).sort(), ['new.png', 'old.png', 'old.png.meta', 'replaced.png', 'replaced.png.meta'])

  for (const k of ['old.png', 'new.png', 'replaced.png']) {
    await storage.delete(`results/del/${k}`)
    t.equal(await storage.head(`results/del/${k}`), null, `${k} is gone`)
  }
  t.same(await readdir(dir), [], 'objects and sidecars removed')
})

t.test('a half-written object is never visible; the previous one stays until the rename', async (t) => {
  const key = 'results/half/obj.bin'
  const dir = join(dataDir, 'media', 'results', 'half')
  const before = randomBytes(1000)
  const old = await storage.put(key, before, 'application/octet-stream')
  const first = randomBytes(100_000)
  const second = randomBytes(50_000)
  const source = new PassThrough()
  const putting = storage.put(key, source, 'video/mp4')
  source.write(first)
  const tmp = await waitFor(async () => {
    for (const n of await readdir(dir)) {
      if (n.includes('.tmp-') && (await stat(join(dir, n))).size >= first.length) return n
    }
    return null
  }, { what: 'the first chunk to reach the temp file' })

  t.equal(await storage.head(`results/half/${tmp}`), null, 'the temp file is not an object')
  const mid = await storage.head(key)
  t.equal(mid!.etag, old.etag, 'head still answers the previous object')
  t.equal(mid!.size, before.length)
  t.equal(mid!.contentType, 'application/octet-stream')
  t.same(await readAll(await storage.read(key)), before, 'read still answers the previous bytes')

  source.end(second)
  const put = await putting
  const h = await storage.head(key)
  t.equal(h!.etag, put.etag)
  t.equal(h!.contentType, 'video/mp4')
  t.equal(h!.size, first.length + second.length)
  t.same(await readAll(await storage.read(key)), Buffer.concat([first, second]))
  t.same(await readdir(dir), ['obj.bin'], 'one file, the temp file renamed into place')
})

t.test('storageConfig is a plain, cloneable copy for worker threads', async (t) => {
  const sc = storageConfig(config)
  const cloned = structuredClone(sc)
  t.same(cloned, { dataDir, publicBaseUrl: 'https://api.example.com', storageDriver: 'local', s3: config.s3 })
  const again = await createStorage(cloned)
  t.equal(again.url('a.png'), storage.url('a.png'))
})

t.test('STORAGE_DRIVER must be local or s3, and s3 needs a bucket', async (t) => {
  t.throws(() => loadConfig({ STORAGE_DRIVER: 'ftp' }), /STORAGE_DRIVER/)
  t.throws(() => loadConfig({ STORAGE_DRIVER: 's3' }), /S3_BUCKET/)
  const c = loadConfig({ STORAGE_DRIVER: 's3', S3_BUCKET: 'b', S3_ENDPOINT: 'http://127.0.0.1:9000/', S3_PUBLIC_URL: 'https://cdn.example.com/media/' })
  t.equal(c.s3.endpoint, 'http://127.0.0.1:9000')
  t.equal(c.s3.publicUrl, 'https://cdn.example.com/media')
  t.equal(c.s3.forcePathStyle, true, 'path style with a custom endpoint')
  t.equal(c.s3.region, 'us-east-1')
  t.equal(loadConfig({ STORAGE_DRIVER: 's3', S3_BUCKET: 'b' }).s3.forcePathStyle, false, 'virtual-hosted style on AWS')
})
