import { createHash, randomBytes } from 'node:crypto'
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { Transform, type Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { isSafeKey, type ByteRange, type PutOptions, type Storage, type StoredObject } from './storage.js'

interface Meta { contentType: string; etag: string }

/**
 * Local-filesystem storage under DATA_DIR/media (the default; docs/architecture.md "Providers and media"), served by
 * the front end under /files/. The content type and ETag sit beside each object in
 * `<file>.meta`; the ETag is a hash of the content, so it is stable across restarts and nodes
 * sharing the directory.
 */
export class LocalStorage implements Storage {
  readonly driver = 'local' as const
  /** Directories this process has made (or found): put() makes each once, not per object. */
  private readonly dirs = new Set<string>()
  constructor (private readonly root: string, private readonly publicBaseUrl: string) {}

  private path (key: string): string {
    if (!isSafeKey(key) || key.endsWith('.meta')) throw new Error(`unsafe storage key ${JSON.stringify(key)}`)
    return join(this.root, key)
  }

  async put (key: string, data: Buffer | Readable, contentType: string, _opts?: PutOptions): Promise<StoredObject> {
    const p = this.path(key)
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

  private async write (key: string, p: string, data: Buffer | Readable, contentType: string): Promise<StoredObject> {
    // Written beside the target and renamed into place: readers never see half a file.
    const tmp = `${p}.tmp-${process.pid}-${randomBytes(6).toString('hex')}`
    const hash = createHash('sha256')
    try {
      if (Buffer.isBuffer(data)) {
        hash.update(data)
        await writeFile(tmp, data)
      } else {
        const hashing = new Transform({ transform (chunk: Buffer, _enc, cb) { hash.update(chunk); cb(null, chunk) } })
        await pipeline(data, hashing, createWriteStream(tmp))
      }
      const etag = `"${hash.digest('base64url').slice(0, 27)}"`
      const meta: Meta = { contentType, etag }
      await writeFile(`${p}.meta`, JSON.stringify(meta))
      await rename(tmp, p)
      const st = await stat(p)
      return { key, size: st.size, contentType, etag, lastModified: st.mtime }
    } catch (err) {
      await rm(tmp, { force: true })
      throw err
    }
  }

  async head (key: string): Promise<StoredObject | null> {
    if (!isSafeKey(key) || key.endsWith('.meta') || /\.tmp-\d+-[0-9a-f]+$/.test(key)) return null
    try {
      const p = this.path(key)
      const [st, raw] = await Promise.all([stat(p), readFile(`${p}.meta`, 'utf8')])
      if (!st.isFile()) return null
      const m = JSON.parse(raw) as Meta
      return { key, size: st.size, contentType: m.contentType, etag: m.etag, lastModified: st.mtime }
    } catch { return null }
  }

  async read (key: string, range?: ByteRange): Promise<Readable> {
    const stream = createReadStream(this.path(key), range ? { start: range.start, end: range.end } : {})
    // Surface a missing file here rather than as a later 'error' event.
    await new Promise<void>((resolve, reject) => {
      stream.once('open', () => { stream.off('error', reject); resolve() })
      stream.once('error', reject)
    })
    return stream
  }

  async delete (key: string): Promise<void> {
    const p = this.path(key)
    await rm(p, { force: true })
    await rm(`${p}.meta`, { force: true })
  }

  url (key: string): string { return `${this.publicBaseUrl}/files/${key}` }
}
