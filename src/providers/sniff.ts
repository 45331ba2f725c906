import { fileTypeFromBuffer } from 'file-type'

/** A media type as its bytes show it: the MIME type and the file extension results are stored under. */
export interface Sniffed { mime: string; ext: string }

const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
const JPEG: Sniffed = { mime: 'image/jpeg', ext: 'jpg' }
const PNG_TYPE: Sniffed = { mime: 'image/png', ext: 'png' }
const WEBP: Sniffed = { mime: 'image/webp', ext: 'webp' }

/**
 * A PNG whose chunks reach IDAT with no acTL before it: a still image, as file-type calls it
 * (an acTL chunk first makes it an animated PNG, left to file-type).
 */
function stillPng (b: Buffer): boolean {
  let at = 8
  while (at + 8 <= b.length) {
    const type = b.toString('latin1', at + 4, at + 8)
    if (type === 'IDAT') return true
    if (type === 'acTL') return false
    at += 12 + b.readUInt32BE(at)
  }
  return false
}

/**
 * The type of a result from its first bytes (docs/providers.md "Results"). The formats image
 * models answer with (still PNG, JPEG, WebP) are recognised here from their signatures, without
 * file-type's tokenizer (about 20 µs a call, and a promise); anything else, and anything these
 * checks are not sure of, goes to file-type, which decides as before.
 */
export async function sniff (head: Buffer): Promise<Sniffed | undefined> {
  if (head.length >= 3 && head[0] === 0xff && head[1] === 0xd8 && head[2] === 0xff) return JPEG
  if (head.length >= 33 && head.subarray(0, 8).equals(PNG) && stillPng(head)) return PNG_TYPE
  if (head.length >= 16 && head.toString('latin1', 0, 4) === 'RIFF' && head.toString('latin1', 8, 12) === 'WEBP') return WEBP
  return fileTypeFromBuffer(head)
}
