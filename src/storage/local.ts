import { createHash } from 'node:crypto'
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir, rename, rm, stat, writeFile, readFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { isSafeKey, type Storage, type StoredObject } from './storage.js'

/**
 * Local-filesystem storage under DATA_DIR/media (the default; DESIGN.md section 6), served by
 * the front end under /files/. The content type sits beside each object in `<file>.meta`.
 */
export class LocalStorage implements Storage {
  readonly driver = 'local' as const
  constructor (private readonly root: string, private readonly publicBaseUrl: string) {}

  private path (key: string): string {
    if (!isSafeKey(key)) throw new Error(`unsafe storage key ${JSON.stringify(key)}`)
    return join(this.root, key)
  }

  async put (key: string, data: Buffer | Readable, contentType: string): Promise<StoredObject> {
    const p = this.path(key)
    await mkdir(dirname(p), { recursive: true })
    const tmp = `${p}.tmp-${process.pid}-${Date.now()}`
    const hash = createHash('sha256')
    if (Buffer.isBuffer(data)) {
      hash.update(data)
      await writeFile(tmp, data)
    } else {
      data.on('data', (c: Buffer) => hash.update(c))
      await pipeline(data, createWriteStream(tmp))
    }
    const etag = `"${hash.digest('base64url').slice(0, 27)}"`
    await writeFile(`${p}.meta`, JSON.stringify({ contentType, etag }))
    await rename(tmp, p)
    const st = await stat(p)
    return { key, size: st.size, contentType, etag, lastModified: st.mtime }
  }

  async head (key: string): Promise<StoredObject | null> {
    if (!isSafeKey(key) || key.endsWith('.meta')) return null
    try {
      const p = this.path(key)
      const [st, meta] = await Promise.all([stat(p), readFile(`${p}.meta`, 'utf8')])
      if (!st.isFile()) return null
      const m = JSON.parse(meta) as { contentType: string; etag: string }
      return { key, size: st.size, contentType: m.contentType, etag: m.etag, lastModified: st.mtime }
    } catch { return null }
  }

  async read (key: string, range?: { start: number; end: number }): Promise<Readable> {
    return createReadStream(this.path(key), range ? { start: range.start, end: range.end } : {})
  }

  async delete (key: string): Promise<void> {
    const p = this.path(key)
    await rm(p, { force: true })
    await rm(`${p}.meta`, { force: true })
  }

  url (key: string): string { return `${this.publicBaseUrl}/files/${key}` }
}
