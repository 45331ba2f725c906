import { Type } from '@sinclair/typebox'
import busboy from 'busboy'
import { fileTypeFromFile } from 'file-type'
import { randomBytes } from 'node:crypto'
import { createReadStream, createWriteStream, type WriteStream } from 'node:fs'
import { mkdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { Transform, type Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { ApiError } from '../../errors.js'
import { validationError } from '../../catalog/validate.js'
import { METADATA_TEXT_BUDGET } from '../../moderation.js'
import { insertUpload, type UploadKind } from '../../db/uploads.js'
import type { Reply, Route, RouteContext } from '../route.js'

const MB = 1024 * 1024

/** What one detected file type is stored and served as. */
interface Accepted { contentType: string; ext: string }

/**
 * Per-kind rules (docs/api.md "Uploads"). `exts` are the file-name extensions the API allows; `types`
 * maps what `file-type` detects from the magic bytes to the stored Content-Type and key
 * extension. Both must agree with the kind.
 */
export const UPLOAD_KINDS: Record<UploadKind, { maxBytes: number; exts: readonly string[]; types: Record<string, Accepted> }> = {
  image: {
    maxBytes: 10 * MB,
    exts: ['jpg', 'jpeg', 'png', 'webp', 'avif'],
    types: {
      jpg: { contentType: 'image/jpeg', ext: 'jpg' },
      png: { contentType: 'image/png', ext: 'png' },
      apng: { contentType: 'image/png', ext: 'png' },
      webp: { contentType: 'image/webp', ext: 'webp' },
      avif: { contentType: 'image/avif', ext: 'avif' },
    },
  },
  audio: {
    maxBytes: 5 * MB,
    exts: ['mp3', 'wav', 'aac', 'm4a', 'mp4', 'ogg'],
    types: {
      mp3: { contentType: 'audio/mpeg', ext: 'mp3' },
      wav: { contentType: 'audio/wav', ext: 'wav' },
      aac: { contentType: 'audio/aac', ext: 'aac' },
      m4a: { contentType: 'audio/mp4', ext: 'm4a' },
      // An MP4 container can hold audio only; its tracks are not inspected.
      mp4: { contentType: 'audio/mp4', ext: 'mp4' },
      ogg: { contentType: 'audio/ogg', ext: 'ogg' },
      oga: { contentType: 'audio/ogg', ext: 'ogg' },
      opus: { contentType: 'audio/ogg', ext: 'ogg' },
      spx: { contentType: 'audio/ogg', ext: 'ogg' },
    },
  },
  video: {
    maxBytes: 50 * MB,
    exts: ['mp4', 'mov', 'avi', 'webm', 'mpg', 'mpeg'],
    types: {
      mp4: { contentType: 'video/mp4', ext: 'mp4' },
      m4v: { contentType: 'video/mp4', ext: 'mp4' },
      mov: { contentType: 'video/quicktime', ext: 'mov' },
      avi: { contentType: 'video/x-msvideo', ext: 'avi' },
      webm: { contentType: 'video/webm', ext: 'webm' },
      mpg: { contentType: 'video/mpeg', ext: 'mpg' },
    },
  },
}

const KINDS = Object.keys(UPLOAD_KINDS) as UploadKind[]
/** The cap applied while the kind is not known yet (file part before the kind field). */
const LARGEST_CAP = Math.max(...KINDS.map(k => UPLOAD_KINDS[k].maxBytes))
/** Room for the multipart framing and the kind field when judging a declared Content-Length. */
const FORM_OVERHEAD = 64 * 1024
/** Video uploads are transient (docs/api.md "Uploads": about 90 days); image and audio are durable. */
export const VIDEO_RETENTION_MS = 90 * 24 * 3600 * 1000

function isKind (v: string): v is UploadKind { return Object.prototype.hasOwnProperty.call(UPLOAD_KINDS, v) }

function extOf (filename: string): string {
  const dot = filename.lastIndexOf('.')
  return dot < 0 ? '' : filename.slice(dot + 1).toLowerCase()
}

/** "An image", "An audio", "A video": for messages. */
function an (kind: UploadKind): string { return kind === 'video' ? 'A video' : `An ${kind}` }

function tooLarge (kind: UploadKind | undefined): ApiError {
  const cap = kind ? UPLOAD_KINDS[kind].maxBytes : LARGEST_CAP
  return new ApiError('PAYLOAD_TOO_LARGE', kind
    ? `${an(kind)} upload may be at most ${cap / MB} MB`
    : `An upload may be at most ${cap / MB} MB`, { details: { kind: kind ?? null, max_bytes: cap } })
}

function badExtension (kind: UploadKind, filename: string): ApiError {
  return new ApiError('UNSUPPORTED_MEDIA_TYPE', `${an(kind)} upload must be one of ${UPLOAD_KINDS[kind].exts.map(e => '.' + e).join(' ')}; got ${JSON.stringify(filename)}`, { details: { kind, allowed_extensions: UPLOAD_KINDS[kind].exts } })
}

function invalid (path: string, message: string): ApiError {
  return validationError([{ path, message }])
}

/** The request ended or failed while still being read: answered early, connection closed. */
class EarlyAnswer extends Error {
  constructor (readonly error: ApiError | null) { super(error?.message ?? 'client went away') }
}

interface Received { kind: UploadKind; filename: string; size: number }

/** The temp-file write in progress, so the caller can stop it and wait before deleting. */
interface Spool { file: Readable | null; out: WriteStream | null; writing: Promise<void> | null }

/**
 * Parses the multipart body as it arrives. The file part is streamed to `tmp` through a
 * counter that fails the moment the cap is crossed: the kind's cap when `kind` came first,
 * else the largest cap (the kind's own is then checked once the form is complete).
 * A file-name extension outside the kind's list is refused as soon as both are known.
 */
function receive (ctx: RouteContext, contentType: string, tmp: string, spool: Spool): Promise<Received> {
  const body = ctx.bodyStream!
  return new Promise((resolve, reject) => {
    let settled = false
    const fail = (e: ApiError | null) => {
      if (settled) return
      settled = true
      body.unpipe()
      // Destroyed with an error so the temp-file pipeline always settles (a plain destroy of a
      // part that already ended can leave it waiting forever).
      const stop = new Error('upload refused')
      spool.file?.destroy(stop)
      spool.out?.destroy(stop)
      reject(new EarlyAnswer(e))
    }
    let bb: busboy.Busboy
    try {
      bb = busboy({
        headers: { 'content-type': contentType },
        limits: { files: 1, fields: 4, parts: 6, fieldSize: 1024, fieldNameSize: 100, headerPairs: 20 },
      })
    } catch (e) {
      fail(invalid('', `must be multipart/form-data with a boundary (${(e as Error).message})`))
      return
    }
    ctx.onAborted(() => fail(null))
    bb.on('error', (e: Error) => fail(invalid('', `is not well-formed multipart/form-data (${e.message})`)))
    body.on('error', () => fail(null))

    let kind: UploadKind | undefined
    let filename: string | undefined
    let size = 0

    bb.on('field', (name, value) => {
      if (settled) return
      if (name === 'kind') {
        if (kind !== undefined) return fail(invalid('/kind', 'must be given once'))
        if (!isKind(value)) return fail(invalid('/kind', `must be one of ${KINDS.join(', ')}`))
        kind = value // after the file: its extension and size are judged once the form is complete
      } else if (name === 'file') {
        fail(invalid('/file', 'must be a file part (with a filename)'))
      } else {
        fail(invalid(`/${name}`, 'is not a known field'))
      }
    })
    bb.on('file', (name, stream, info) => {
      if (settled || name !== 'file') {
        stream.resume()
        if (name !== 'file') fail(invalid(`/${name}`, 'is not a known field'))
        return
      }
      filename = info.filename ?? ''
      if (kind !== undefined && !UPLOAD_KINDS[kind].exts.includes(extOf(filename))) {
        stream.resume()
        return fail(badExtension(kind, filename))
      }
      const counter = new Transform({
        transform (chunk: Buffer, _enc, cb) {
          size += chunk.length
          if (size > (kind ? UPLOAD_KINDS[kind].maxBytes : LARGEST_CAP)) cb(tooLarge(kind))
          else cb(null, chunk)
        },
      })
      spool.file = stream
      spool.out = createWriteStream(tmp)
      spool.writing = pipeline(stream, counter, spool.out).catch((e) => {
        fail(e instanceof ApiError ? e : invalid('/file', `could not be read (${(e as Error).message})`))
      })
    })
    bb.on('filesLimit', () => fail(invalid('/file', 'must be sent once')))
    bb.on('fieldsLimit', () => fail(invalid('', 'has too many fields')))
    bb.on('partsLimit', () => fail(invalid('', 'has too many parts')))
    bb.on('close', () => {
      void (async () => {
        await spool.writing
        if (settled) return
        settled = true
        const problems: Array<{ path: string; message: string }> = []
        if (filename === undefined) problems.push({ path: '/file', message: 'is required' })
        if (kind === undefined) problems.push({ path: '/kind', message: `is required (one of ${KINDS.join(', ')})` })
        if (problems.length) {
          reject(validationError(problems))
          return
        }
        resolve({ kind: kind!, filename: filename!, size })
      })()
    })
    body.pipe(bb)
  })
}

/** A random, unguessable key: uploads/<yyyy>/<mm>/u_<22 chars>.<ext>. */
export function uploadKey (ext: string, now = new Date()): string {
  const mm = String(now.getUTCMonth() + 1).padStart(2, '0')
  return `uploads/${now.getUTCFullYear()}/${mm}/u_${randomBytes(16).toString('base64url')}.${ext}`
}

/**
 * POST /v1/uploads (docs/api.md "Uploads", docs/architecture.md "Providers and media"): multipart `file` + `kind`, free.
 * The file is streamed to DATA_DIR/tmp while counted (413 at the cap), then checked: file-name
 * extension and magic bytes must both belong to the kind (415), images pass the content
 * screen on their file name and embedded text metadata (403), and only then is it stored.
 */
async function upload (ctx: RouteContext): Promise<Reply> {
  const { config, storage, sql } = ctx.services
  await ctx.services.auth.requireVerified(ctx.caller!, 'upload files')
  const contentType = ctx.headers['content-type'] ?? ''
  if (!/^multipart\/form-data\s*;/i.test(contentType)) {
    throw new ApiError('UNSUPPORTED_MEDIA_TYPE', 'Send multipart/form-data with the fields file and kind')
  }
  const declared = Number(ctx.headers['content-length'])
  if (Number.isFinite(declared) && declared > LARGEST_CAP + FORM_OVERHEAD) throw tooLarge(undefined)

  const tmpDir = join(config.dataDir, 'tmp')
  const tmp = join(tmpDir, `upload-${process.pid}-${randomBytes(9).toString('base64url')}`)
  const spool: Spool = { file: null, out: null, writing: null }
  try {
    await mkdir(tmpDir, { recursive: true })
    let got: Received
    try {
      got = await receive(ctx, contentType, tmp, spool)
    } catch (e) {
      // Answered by the pipeline, after the rest of the body was read and dropped (bounded:
      // src/http/body.ts), so the client reads the answer instead of a write error.
      if (e instanceof EarlyAnswer) { if (e.error && !ctx.aborted()) throw e.error; return { status: -1 } }
      throw e
    }
    const rules = UPLOAD_KINDS[got.kind]
    if (got.size > rules.maxBytes) throw tooLarge(got.kind)
    if (!rules.exts.includes(extOf(got.filename))) throw badExtension(got.kind, got.filename)
    if (got.size === 0) throw invalid('/file', 'is empty')
    const detected = await fileTypeFromFile(tmp)
    const accepted = detected ? rules.types[detected.ext] : undefined
    if (!accepted) {
      throw new ApiError('UNSUPPORTED_MEDIA_TYPE', `The file's content is not ${an(got.kind).toLowerCase()} file of an allowed type${detected ? ` (detected ${detected.mime})` : ''}`, { details: { kind: got.kind, detected: detected?.mime ?? null } })
    }
    if (got.kind === 'image') {
      // Off the event loop, within a byte and a time budget (src/media/screen.ts).
      const v = await ctx.services.imageScreen.screen({ path: tmp, format: detected!.ext, filename: got.filename, terms: config.moderationTerms })
      if (!v.ok) throw invalid('/file', `carries more embedded text metadata than the content screen reads (${v.budget === 'bytes' ? `${METADATA_TEXT_BUDGET / MB} MB of text` : 'its time budget'}); remove the metadata and upload it again`)
      if (v.term !== null) throw new ApiError('CONTENT_POLICY_VIOLATION', 'The image failed the content screen (file name or embedded text)')
    }
    if (ctx.aborted()) return { status: -1 }

    const key = uploadKey(accepted.ext)
    const stored = await storage.put(key, createReadStream(tmp), accepted.contentType, { size: got.size })
    const expiresAt = got.kind === 'video' ? new Date(Date.now() + VIDEO_RETENTION_MS) : null
    try {
      await insertUpload(sql, { accountId: ctx.caller!.accountId, key, kind: got.kind, size: stored.size, contentType: accepted.contentType, expiresAt })
    } catch (e) {
      await storage.delete(key).catch(() => {})
      throw e
    }
    return {
      status: 201,
      body: { url: storage.url(key), kind: got.kind, size: stored.size, content_type: accepted.contentType, expires_at: expiresAt?.toISOString() ?? null },
    }
  } finally {
    await spool.writing
    // A write stream destroyed early may still be opening the file: wait for its close.
    if (spool.out && !spool.out.closed) await new Promise<void>(resolve => spool.out!.once('close', () => resolve()))
    await rm(tmp, { force: true }).catch(() => {})
  }
}

const Upload = Type.Object({
  url: Type.String({ format: 'uri', description: 'Public URL (PUBLIC_BASE_URL/files/... or S3_PUBLIC_URL/...), accepted as any generation media input' }),
  kind: Type.Union([Type.Literal('image'), Type.Literal('audio'), Type.Literal('video')]),
  size: Type.Integer({ minimum: 1, description: 'Bytes stored' }),
  content_type: Type.String({ description: 'Detected from the magic bytes' }),
  expires_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], { description: 'Video uploads expire after about 90 days; null for durable image and audio uploads' }),
})

export const routes: Route[] = [
  {
    method: 'POST',
    path: '/v1/uploads',
    auth: 'key',
    scope: 'generate',
    rawBody: true,
    summary: 'Upload an image (10 MB), audio (5 MB) or video (50 MB) file for use as a generation input; free',
    tag: 'Uploads',
    errors: ['VALIDATION_ERROR', 'NOT_ELIGIBLE', 'PAYLOAD_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE', 'CONTENT_POLICY_VIOLATION'],
    schema: { response: { 201: Upload } },
    rawBodySchema: {
      'multipart/form-data': {
        schema: {
          type: 'object',
          required: ['file', 'kind'],
          properties: {
            kind: { type: 'string', enum: KINDS, description: 'image: .jpg .jpeg .png .webp .avif up to 10 MB; audio: .mp3 .wav .aac .m4a .mp4 .ogg up to 5 MB; video: .mp4 .mov .avi .webm .mpg .mpeg up to 50 MB' },
            // OAS 3.1 binary content: contentMediaType and no `type` (a `type: string` part makes generated clients want a string, not a Blob).
            file: { contentMediaType: 'application/octet-stream', description: 'The file; its extension and its content must both match the kind' },
          },
        },
        encoding: { file: { contentType: 'image/*, audio/*, video/*, application/octet-stream' } },
      },
    },
    handler: upload,
  },
]
