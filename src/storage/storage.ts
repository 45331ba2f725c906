import type { Readable } from 'node:stream'

/** Metadata of a stored object. */
export interface StoredObject {
  key: string
  size: number
  contentType: string
  /** Strong validator (quoted), stable for the object's content. */
  etag: string
  lastModified: Date
}

/**
 * Where media lives (docs/architecture.md "Providers and media"): provider results and uploads. Keys are relative
 * paths like `results/job_abc.mp4` or `uploads/2026/11/u_x.png`; the public URL of a key is
 * `${PUBLIC_BASE_URL}/files/${key}` for the local driver, or the bucket's URL for S3.
 */
export interface Storage {
  readonly driver: 'local' | 's3'
  /**
   * Stores bytes (or a stream, for uploads) under `key`, replacing any object there. Readers
   * never see a partial object: a failed or aborted put leaves the old one (or none).
   */
  put (key: string, data: Buffer | Readable, contentType: string, opts?: PutOptions): Promise<StoredObject>
  /** Metadata, or null when the key does not exist. */
  head (key: string): Promise<StoredObject | null>
  /** A stream of the object, optionally a byte range (inclusive `end`). */
  read (key: string, range?: ByteRange): Promise<Readable>
  delete (key: string): Promise<void>
  /** The public URL clients use for `key`. */
  url (key: string): string
  /** Releases connections (S3 client sockets); optional. */
  close? (): void
}

/** Hints for `put`. */
export interface PutOptions {
  /** Byte length of a stream, when known (S3 then uploads it directly instead of spooling it). */
  size?: number
}

/** A byte range, both ends inclusive (HTTP Range semantics). */
export interface ByteRange { start: number; end: number }

/** Keys are path-like and never escape the storage root. */
export function isSafeKey (key: string): boolean {
  return key.length > 0 && key.length <= 512 && /^[A-Za-z0-9][A-Za-z0-9._/-]*$/.test(key) &&
    !key.split('/').some(seg => seg === '' || seg === '.' || seg === '..')
}
