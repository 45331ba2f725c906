/**
 * The header the local driver writes before each object's bytes (docs/architecture.md
 * "Providers and media", docs/decisions.md "Local objects carry their own metadata"): the
 * content type and ETag travel inside the object's one file, so a put creates one inode.
 *
 *   0   8 bytes  magic 89 47 4a 4f 0d 0a 1a 0a ("\x89GJO\r\n\x1a\n")
 *   8   1 byte   version (1)
 *   9   1 byte   ETag length E (ASCII, quotes included)
 *   10  2 bytes  content type length C (big-endian, ASCII)
 *   12  E bytes  ETag
 *   12+E C bytes content type
 *   12+E+C       the object's bytes
 *
 * The ETag sits at a fixed offset so a streamed put can write a placeholder first and the real
 * tag once the content is hashed. Objects of the previous layout (bytes only, metadata in a
 * `.meta` file beside them) begin with their media's own signature, never with this magic.
 */
export const MAGIC = Buffer.from([0x89, 0x47, 0x4a, 0x4f, 0x0d, 0x0a, 0x1a, 0x0a])
const VERSION = 1
const FIXED = 12
/** Where the ETag starts in the file. */
export const ETAG_OFFSET = FIXED
const ETAG_MAX = 64
const CONTENT_TYPE_MAX = 255
/** No header is longer: reading this many bytes from the start of a file always gets it whole. */
export const HEADER_MAX = FIXED + ETAG_MAX + CONTENT_TYPE_MAX

export interface ObjectHeader {
  contentType: string
  etag: string
  /** Bytes before the object's content. */
  length: number
}

const ETAG_RE = /^"[A-Za-z0-9_-]+"$/
const CONTENT_TYPE_RE = /^[\x21-\x7e][\x20-\x7e]*$/

/** True when `contentType` fits a header (printable ASCII, as an HTTP header value must be). */
export function storableContentType (contentType: string): boolean {
  return contentType.length <= CONTENT_TYPE_MAX && CONTENT_TYPE_RE.test(contentType)
}

export function encodeHeader (contentType: string, etag: string): Buffer {
  if (!storableContentType(contentType)) throw new Error(`content type ${JSON.stringify(contentType.slice(0, 80))} cannot be stored`)
  if (etag.length > ETAG_MAX || !ETAG_RE.test(etag)) throw new Error(`ETag ${JSON.stringify(etag)} cannot be stored`)
  const b = Buffer.allocUnsafe(FIXED + etag.length + contentType.length)
  MAGIC.copy(b, 0)
  b[8] = VERSION
  b[9] = etag.length
  b.writeUInt16BE(contentType.length, 10)
  b.write(etag, FIXED, 'latin1')
  b.write(contentType, FIXED + etag.length, 'latin1')
  return b
}

/** The header at the start of `head` (the first bytes of a file), or null when it has none. */
export function decodeHeader (head: Buffer): ObjectHeader | null {
  if (head.length < FIXED || !head.subarray(0, 8).equals(MAGIC) || head[8] !== VERSION) return null
  const e = head[9]
  const c = head.readUInt16BE(10)
  const length = FIXED + e + c
  if (e > ETAG_MAX || c > CONTENT_TYPE_MAX || head.length < length) return null
  const etag = head.toString('latin1', FIXED, FIXED + e)
  const contentType = head.toString('latin1', FIXED + e, length)
  if (!ETAG_RE.test(etag) || !CONTENT_TYPE_RE.test(contentType)) return null
  return { contentType, etag, length }
}
