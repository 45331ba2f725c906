import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3'
import { randomBytes } from 'node:crypto'
import { createReadStream, createWriteStream } from 'node:fs'
import { mkdir, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { S3Config } from '../config.js'
import { isSafeKey, type ByteRange, type PutOptions, type Storage, type StoredObject } from './storage.js'

/**
 * S3-compatible storage (docs/architecture.md "Providers and media") for several nodes sharing media. Objects keep
 * their Content-Type in the bucket; the ETag is the bucket's. `url()` is S3_PUBLIC_URL/<key>
 * when set (a CDN or public bucket), else PUBLIC_BASE_URL/files/<key>, which the front end
 * serves by reading from the bucket (Range included).
 */
export class S3Storage implements Storage {
  readonly driver = 's3' as const
  readonly client: S3Client
  private readonly bucket: string

  constructor (private readonly cfg: S3Config, private readonly publicBaseUrl: string, private readonly spoolDir = tmpdir()) {
    if (!cfg.bucket) throw new Error('S3 storage needs a bucket (S3_BUCKET)')
    this.bucket = cfg.bucket
    this.client = new S3Client({
      region: cfg.region,
      endpoint: cfg.endpoint,
      forcePathStyle: cfg.forcePathStyle,
      credentials: cfg.accessKeyId && cfg.secretAccessKey ? { accessKeyId: cfg.accessKeyId, secretAccessKey: cfg.secretAccessKey } : undefined,
      // Checksums only where S3 requires them: the default (CRC32 trailers with aws-chunked
      // streaming) is not understood by every S3-compatible server.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    })
  }

  private check (key: string): string {
    if (!isSafeKey(key)) throw new Error(`unsafe storage key ${JSON.stringify(key)}`)
    return key
  }

  async put (key: string, data: Buffer | Readable, contentType: string, opts: PutOptions = {}): Promise<StoredObject> {
    this.check(key)
    if (Buffer.isBuffer(data)) return this.putBody(key, data, data.length, contentType)
    if (opts.size !== undefined) return this.putBody(key, data, opts.size, contentType)
    // PutObject needs the length up front: spool a stream of unknown length to a temp file.
    const spool = join(this.spoolDir, `s3-spool-${process.pid}-${randomBytes(8).toString('hex')}`)
    try {
      await mkdir(this.spoolDir, { recursive: true })
      await pipeline(data, createWriteStream(spool))
      const { size } = await stat(spool)
      return await this.putBody(key, createReadStream(spool), size, contentType)
    } finally {
      await rm(spool, { force: true })
    }
  }

  private async putBody (key: string, body: Buffer | Readable, size: number, contentType: string): Promise<StoredObject> {
    const out = await this.client.send(new PutObjectCommand({
      Bucket: this.bucket, Key: key, Body: body, ContentLength: size, ContentType: contentType,
    }))
    return { key, size, contentType, etag: out.ETag ?? `"${randomBytes(12).toString('hex')}"`, lastModified: new Date() }
  }

  async head (key: string): Promise<StoredObject | null> {
    if (!isSafeKey(key)) return null
    try {
      const h = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }))
      return {
        key,
        size: h.ContentLength ?? 0,
        contentType: h.ContentType ?? 'application/octet-stream',
        etag: h.ETag ?? '"0"',
        lastModified: h.LastModified ?? new Date(0),
      }
    } catch (err) {
      if (isNotFound(err)) return null
      throw err
    }
  }

  async read (key: string, range?: ByteRange): Promise<Readable> {
    const out = await this.client.send(new GetObjectCommand({
      Bucket: this.bucket, Key: this.check(key), Range: range ? `bytes=${range.start}-${range.end}` : undefined,
    }))
    // In Node the SDK's body is an http.IncomingMessage (a Readable).
    return out.Body as Readable
  }

  async delete (key: string): Promise<void> {
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.check(key) }))
  }

  url (key: string): string {
    return this.cfg.publicUrl ? `${this.cfg.publicUrl}/${key}` : `${this.publicBaseUrl}/files/${key}`
  }

  close (): void { this.client.destroy() }
}

function isNotFound (err: unknown): boolean {
  const e = err as { name?: string; $metadata?: { httpStatusCode?: number } }
  return e?.name === 'NotFound' || e?.name === 'NoSuchKey' || e?.$metadata?.httpStatusCode === 404
}
