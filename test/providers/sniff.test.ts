// The result type check (docs/providers.md "Results"): the signatures recognised without
// file-type give the answer file-type gives; everything else is file-type's answer.
import { readFile } from 'node:fs/promises'
import t from 'tap'
import { fileTypeFromBuffer } from 'file-type'
import { sniff } from '../../src/providers/sniff.js'

const asset = (name: string) => readFile(new URL(`../../../assets/sim/${name}`, import.meta.url))

/** A PNG made of the given chunk types (empty data, CRCs not checked by either side). */
function png (...types: string[]): Buffer {
  const parts = [Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])]
  for (const type of types) {
    const len = type === 'IHDR' ? 13 : type === 'acTL' ? 8 : 0
    const c = Buffer.alloc(12 + len)
    c.writeUInt32BE(len, 0)
    c.write(type, 4, 'latin1')
    parts.push(c)
  }
  return Buffer.concat(parts)
}

t.test('the sample media: the same type as file-type', async (t) => {
  for (const name of ['sample.png', 'sample.jpg', 'sample.mp4', 'sample.mp3']) {
    const b = await asset(name)
    t.same(await sniff(b), await fileTypeFromBuffer(b).then(f => f && { mime: f.mime, ext: f.ext }), name)
  }
})

t.test('a still PNG is image/png; an animated one (acTL before IDAT) is left to file-type', async (t) => {
  t.same(await sniff(png('IHDR', 'IDAT', 'IEND')), { mime: 'image/png', ext: 'png' })
  t.same(await sniff(png('IHDR', 'sRGB', 'IDAT', 'IEND')), { mime: 'image/png', ext: 'png' }, 'other chunks before IDAT')
  const apng = png('IHDR', 'acTL', 'IDAT', 'IEND')
  const ft = await fileTypeFromBuffer(apng)
  t.equal(ft?.mime, 'image/apng', 'file-type calls it animated')
  t.same(await sniff(apng), { mime: ft!.mime, ext: ft!.ext }, 'and so does sniff')
  t.equal((await sniff(png('IHDR')))?.mime, (await fileTypeFromBuffer(png('IHDR')))?.mime, 'no IDAT within the head: file-type decides')
})

t.test('WebP and JPEG by signature; text is no media', async (t) => {
  const webp = Buffer.concat([Buffer.from('RIFF'), Buffer.alloc(4), Buffer.from('WEBPVP8 '), Buffer.alloc(20)])
  t.same(await sniff(webp), { mime: 'image/webp', ext: 'webp' })
  t.equal((await fileTypeFromBuffer(webp))?.mime, 'image/webp', 'as file-type says')
  t.same(await sniff(Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0x10])), { mime: 'image/jpeg', ext: 'jpg' })
  t.equal(await sniff(Buffer.from('<html>not media</html>')), undefined)
})
