import { randomBytes } from 'node:crypto'
import { Readable } from 'node:stream'
import type { Storage } from '../../src/storage/storage.js'

type T = any

async function readAll (s: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of s) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}

/**
 * The behaviour every storage driver shares (the job engine relies on put/head/url, the
 * files route on head/read with ranges, the sweeper on delete). Run by local.test.ts and
 * s3.test.ts against their driver.
 */
export function storageContract (t: T, storage: Storage, expectUrl: (key: string) => string): void {
  t.test('put of a buffer, then head and read it back', async (t: T) => {
    const data = randomBytes(5000)
    const put = await storage.put('results/a/one.png', data, 'image/png')
    t.equal(put.key, 'results/a/one.png')
    t.equal(put.size, 5000)
    t.equal(put.contentType, 'image/png')
    t.match(put.etag, /^"[^"]+"$/)
    const h = await storage.head('results/a/one.png')
    t.ok(h)
    t.equal(h!.size, 5000)
    t.equal(h!.contentType, 'image/png')
    t.equal(h!.etag, put.etag, 'head reports the etag put returned')
    t.ok(h!.lastModified instanceof Date)
    t.same(await readAll(await storage.read('results/a/one.png')), data)
  })

  t.test('put of a stream of unknown length', async (t: T) => {
    const parts = [randomBytes(70000), randomBytes(3), randomBytes(100000)]
    const put = await storage.put('uploads/2026/01/u_stream.mp4', Readable.from(parts), 'video/mp4')
    t.equal(put.size, 170003)
    t.same(await readAll(await storage.read('uploads/2026/01/u_stream.mp4')), Buffer.concat(parts))
  })

  t.test('put of a stream with its size given', async (t: T) => {
    const data = randomBytes(123456)
    const put = await storage.put('uploads/2026/01/u_sized.wav', Readable.from([data]), 'audio/wav', { size: data.length })
    t.equal(put.size, data.length)
    t.equal((await storage.head('uploads/2026/01/u_sized.wav'))!.contentType, 'audio/wav')
  })

  t.test('read of a byte range (inclusive end)', async (t: T) => {
    const data = Buffer.from('0123456789abcdefghij')
    await storage.put('results/range.txt', data, 'text/plain')
    t.equal((await readAll(await storage.read('results/range.txt', { start: 3, end: 7 }))).toString(), '34567')
    t.equal((await readAll(await storage.read('results/range.txt', { start: 19, end: 19 }))).toString(), 'j')
  })

  t.test('the etag follows the content', async (t: T) => {
    const a = await storage.put('results/e1.bin', Buffer.from('same'), 'application/octet-stream')
    const b = await storage.put('results/e2.bin', Buffer.from('same'), 'application/octet-stream')
    const c = await storage.put('results/e1.bin', Buffer.from('different'), 'application/octet-stream')
    t.equal(a.etag, b.etag, 'same bytes, same tag')
    t.not(a.etag, c.etag, 'new bytes, new tag')
    t.equal((await storage.head('results/e1.bin'))!.size, 'different'.length, 'put replaces')
  })

  t.test('head of a missing key is null; delete is idempotent', async (t: T) => {
    t.equal(await storage.head('results/missing.png'), null)
    await storage.put('results/gone.png', Buffer.from('x'), 'image/png')
    await storage.delete('results/gone.png')
    t.equal(await storage.head('results/gone.png'), null)
    await t.resolves(storage.delete('results/gone.png'), 'a second delete does not throw')
  })

  t.test('a failing stream stores nothing', async (t: T) => {
    const bad = new Readable({
      read () {
        this.push(randomBytes(1000))
        this.destroy(new Error('client went away'))
      },
    })
    await t.rejects(storage.put('uploads/2026/01/u_broken.png', bad, 'image/png'))
    t.equal(await storage.head('uploads/2026/01/u_broken.png'), null)
  })

  t.test('unsafe keys are refused', async (t: T) => {
    for (const key of ['../escape.png', 'a/../../b', '/abs.png', '', 'a//b', 'a/./b', '.hidden']) {
      await t.rejects(storage.put(key, Buffer.from('x'), 'image/png'), {}, `put ${JSON.stringify(key)}`)
      t.equal(await storage.head(key), null, `head ${JSON.stringify(key)}`)
    }
  })

  t.test('url() is the public URL of a key', async (t: T) => {
    t.equal(storage.url('uploads/2026/01/u_x.png'), expectUrl('uploads/2026/01/u_x.png'))
  })
}
