import { createHash, randomBytes, type Hash } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import { mkdir, open, readFile, rename, rm, type FileHandle } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { Transform, type Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { ETAG_OFFSET, HEADER_MAX, decodeHeader, encodeHeader, storableContentType, type ObjectHeader } from './object-header.js'
import { isSafeKey, type ByteRange, type PutOptions, type Storage, type StoredObject } from './storage.js'
import { FileWriter } from './file-writer.js'

/** The sidecar of the previous layout, `<file>.meta`, still read for objects written by it. */
interface LegacyMeta { contentType: string; etag: string }

const TMP_RE = /\.tmp-\d+-[0-9a-f]+$/
/** Stands in for the ETag of a streamed object until its content is hashed (same length). */
const PLACEHOLDER_ETAG = `"${'0'.repeat(27)}"`

function etagOf (hash: Hash): string { return `"${hash.digest('base64url').slice(0, 27)}"` }

/**
 * A buffer up to this size is written by the writer thread (one message, then plain system
 * calls; docs/decisions.md "Small objects written by a writer thread"); a larger one, and every
 * stream, through the thread pool here.
 */
export const WRITER_MAX = 1024 * 1024

/**
 * Local-filesystem storage under DATA_DIR/media (the default; docs/architecture.md "Providers
 * and media"), served by the front end under /files/. Each object is ONE file: a small header
 * with its content type and ETag, then its bytes (object-header.ts; docs/decisions.md "Local
 * objects carry their own metadata"). The ETag is a hash of the content, stored with it, so it
 * is stable across restarts and nodes sharing the directory. Objects of the previous layout
 * (bytes only, metadata in `<file>.meta`) are still read and deleted.
 */
export class LocalStorage implements Storage {
  readonly driver = 'local' as const
  /** Directories this process has made (or found): put() makes each once, not per object. */
  private readonly dirs = new Set<string>()
  private readonly writer = new FileWriter()
  /** Temporary names: this instance's random prefix and a counter (no random bytes per put). */
  private readonly tmpPrefix = `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`
  private tmpCount = 0
  constructor (private readonly root: string, private readonly publicBaseUrl: string) {}

  private tmpOf (p: string): string { return `${p}${this.tmpPrefix}${(this.tmpCount++).toString(16)}` }

  private path (key: string): string {
    if (!isSafeKey(key) || key.endsWith('.meta')) throw new Error(`unsafe storage key ${JSON.stringify(key)}`)
    return join(this.root, key)
  }

  async put (key: string, data: Buffer | Readable, contentType: string, _opts?: PutOptions): Promise<StoredObject> {
    const p = this.path(key)
    if (!storableContentType(contentType)) throw new Error(`content type ${JSON.stringify(contentType.slice(0, 80))} cannot be stored`)
    if (Buffer.isBuffer(data) && data.length <= WRITER_MAX) return this.putSmall(key, p, data, contentType)
    const dir = dirname(p)
    if (Buffer.isBuffer(data) && this.dirs.has(dir)) {
      // A directory removed behind our back (an operator's cleanup) is made again.
      try { return await this.write(key, p, data, contentType) } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
        this.dirs.delete(dir)
      }
    }
    await mkdir(dir, { recursive: true })
    // Bounded: keys share a handful of prefixes (results/, uploads/...); a caller with many
    // directories only makes them again.
    if (this.dirs.size < 1024) this.dirs.add(dir)
    return this.write(key, p, data, contentType)
  }

  /** Header and bytes copied into one buffer of its own, moved to the writer thread. */
  private async putSmall (key: string, p: string, data: Buffer, contentType: string): Promise<StoredObject> {
    const { etag, header } = headerOf(data, contentType)
    const bytes = Buffer.allocUnsafeSlow(header.length + data.length)
    header.copy(bytes, 0)
    data.copy(bytes, header.length)
    // Written beside the target and renamed into place: readers never see half a file.
    await this.writer.put(this.tmpOf(p), p, bytes)
    return { key, contentType, size: data.length, etag, lastModified: new Date() }
  }

  private async write (key: string, p: string, data: Buffer | Readable, contentType: string): Promise<StoredObject> {
    // Written beside the target and renamed into place: readers never see half a file.
    const tmp = this.tmpOf(p)
    try {
      const w = Buffer.isBuffer(data) ? await writeBuffer(tmp, data, contentType) : await writeStream(tmp, data, contentType)
      await rename(tmp, p)
      // The time of the put, as the S3 driver answers too; head() reports the file's mtime.
      return { key, contentType, ...w, lastModified: new Date() }
    } catch (err) {
      await rm(tmp, { force: true })
      throw err
    }
  }

  async head (key: string): Promise<StoredObject | null> {
    if (!isSafeKey(key) || key.endsWith('.meta') || TMP_RE.test(key)) return null
    const p = this.path(key)
    let fh: FileHandle
    try { fh = await open(p, 'r') } catch { return null }
    try {
      const st = await fh.stat()
      if (!st.isFile()) return null
      const h = await readHeader(fh)
      if (h) return { key, size: st.size - h.length, contentType: h.contentType, etag: h.etag, lastModified: st.mtime }
      // No header: an object of the previous layout, its metadata in `<file>.meta`.
      const m = JSON.parse(await readFile(`${p}.meta`, 'utf8')) as LegacyMeta
      return { key, size: st.size, contentType: m.contentType, etag: m.etag, lastModified: st.mtime }
    } catch {
      return null
    } finally {
      await fh.close().catch(() => {})
    }
  }

  async read (key: string, range?: ByteRange): Promise<Readable> {
    // Opened here, so a missing file surfaces now rather than as a later 'error' event.
    const fh = await open(this.path(key), 'r')
    let skip: number
    try { skip = (await readHeader(fh))?.length ?? 0 } catch (err) {
      await fh.close().catch(() => {})
      throw err
    }
    return fh.createReadStream(range ? { start: skip + range.start, end: skip + range.end } : { start: skip })
  }

  async delete (key: string): Promise<void> {
    const p = this.path(key)
    await rm(p, { force: true })
    // An object of the previous layout has its metadata beside it.
    await rm(`${p}.meta`, { force: true })
  }

  url (key: string): string { return `${this.publicBaseUrl}/files/${key}` }

  /** Stops the writer thread (a later put starts another). */
  close (): void { void this.writer.close() }
}

interface Written { size: number; etag: string }

/** A buffer: hashed first, then header and bytes in one write. */
/** A buffer's ETag (a hash of its content) and the header written before it. */
function headerOf (data: Buffer, contentType: string): { etag: string; header: Buffer } {
  const etag = etagOf(createHash('sha256').update(data))
  return { etag, header: encodeHeader(contentType, etag) }
}

async function writeBuffer (tmp: string, data: Buffer, contentType: string): Promise<Written> {
  const { etag, header } = headerOf(data, contentType)
  const fh = await open(tmp, 'wx')
  try {
    const total = header.length + data.length
    let done = (await fh.writev([header, data])).bytesWritten
    if (done < total) {
      // A short write (rare for a regular file): the rest, from where it stopped.
      const all = Buffer.concat([header, data])
      while (done < total) done += (await fh.write(all, done)).bytesWritten
    }
    return { size: data.length, etag }
  } finally {
    await fh.close()
  }
}

/**
 * A stream, with bounded memory: the header with a placeholder ETag, the bytes as they come
 * (hashed on the way), then the real ETag written over the placeholder.
 */
async function writeStream (tmp: string, data: Readable, contentType: string): Promise<Written> {
  const header = encodeHeader(contentType, PLACEHOLDER_ETAG)
  const hash = createHash('sha256')
  let size = 0
  const hashing = new Transform({
    construct (cb) { this.push(header); cb() },
    transform (chunk: Buffer, _enc, cb) { hash.update(chunk); size += chunk.length; cb(null, chunk) },
  })
  await pipeline(data, hashing, createWriteStream(tmp, { flags: 'wx' }))
  const etag = etagOf(hash)
  const fh = await open(tmp, 'r+')
  try {
    await fh.write(Buffer.from(etag, 'latin1'), 0, etag.length, ETAG_OFFSET)
    return { size, etag }
  } finally {
    await fh.close()
  }
}

/** The header at the start of an open file, or null for an object of the previous layout. */
async function readHeader (fh: FileHandle): Promise<ObjectHeader | null> {
  const buf = Buffer.allocUnsafe(HEADER_MAX)
  const { bytesRead } = await fh.read(buf, 0, HEADER_MAX, 0)
  return decodeHeader(buf.subarray(0, bytesRead))
}
