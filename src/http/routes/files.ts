import type { HttpResponse } from 'uWebSockets.js'
import type { Readable } from 'node:stream'
import { ApiError } from '../../errors.js'
import { isSafeKey, type ByteRange, type StoredObject } from '../../storage/storage.js'
import { statusLine } from '../respond.js'
import type { Reply, Route, RouteContext } from '../route.js'

/** Stored media never changes under a key (new content gets a new key): cache for a year. */
export const FILE_CACHE_CONTROL = 'public, max-age=31536000, immutable'

const PREFIX = '/files/'
/** The same files under the API prefix: what a client generated from /v1/openapi.json calls. */
const API_PREFIX = '/v1/files/'

/**
 * The storage key of a /files/<key> or /v1/files/<key> path, or null when it is not a safe
 * key. The key is percent-decoded, so `results%2F2026%2F...` (a generated client encodes the
 * slashes of a path parameter) names the same file as `results/2026/...`.
 */
export function keyFromPath (path: string): string | null {
  const prefix = path.startsWith(API_PREFIX) ? API_PREFIX : path.startsWith(PREFIX) ? PREFIX : null
  if (prefix === null) return null
  let key: string
  try { key = decodeURIComponent(path.slice(prefix.length)) } catch { return null }
  return isSafeKey(key) ? key : null
}

/**
 * A `Range` header against an object of `size` bytes (RFC 9110 section 14): a satisfiable
 * single range, `'unsatisfiable'` (416), or null to answer the whole object (no header, a
 * syntax the server may ignore, another unit, or several ranges: multipart/byteranges is not
 * worth its complexity for media players, which ask for one range at a time).
 */
export function parseRange (header: string | undefined, size: number): ByteRange | 'unsatisfiable' | null {
  if (header === undefined) return null
  const m = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header)
  if (!m) return null
  const [, a, b] = m
  if (a === '' && b === '') return null
  if (a === '') {
    const n = Number(b)
    if (n === 0 || size === 0) return 'unsatisfiable'
    return { start: Math.max(0, size - n), end: size - 1 }
  }
  const start = Number(a)
  if (b !== '' && Number(b) < start) return null
  if (start >= size) return 'unsatisfiable'
  const end = b === '' ? size - 1 : Math.min(Number(b), size - 1)
  return { start, end }
}

/** Weak comparison (RFC 9110 8.8.3.2) of an If-None-Match list against `etag`. */
function noneMatch (header: string, etag: string): boolean {
  const bare = etag.replace(/^W\//, '')
  return header.split(',').some(t => { const v = t.trim(); return v === '*' || v.replace(/^W\//, '') === bare })
}

/** If-Range: honour the Range only while the validator still names this object. */
function rangeStillValid (ifRange: string | undefined, obj: StoredObject): boolean {
  if (ifRange === undefined) return true
  const v = ifRange.trim()
  if (v.startsWith('"')) return v === obj.etag
  if (v.startsWith('W/')) return false
  const t = Date.parse(v)
  return Number.isFinite(t) && Math.floor(obj.lastModified.getTime() / 1000) * 1000 <= t
}

/**
 * GET /files/<key> (docs/api.md "Uploads"): stored media with its Content-Type, a strong ETag
 * (If-None-Match answers 304), Last-Modified, single byte ranges (206, 416) so video seeks
 * in a browser, and a year of immutable caching. The body is streamed with uWS backpressure
 * (tryEnd/onWritable) and reading stops as soon as the client goes away.
 */
async function serveFile (ctx: RouteContext): Promise<Reply> {
  const res = ctx.res as HttpResponse
  const key = keyFromPath(ctx.path)
  const obj = key === null ? null : await ctx.services.storage.head(key)
  if (key === null || obj === null) throw new ApiError('NOT_FOUND', 'No such file')
  if (ctx.aborted()) return { status: -1 }

  const headers: Record<string, string> = {
    ...ctx.baseHeaders(),
    'Content-Type': obj.contentType,
    ETag: obj.etag,
    'Last-Modified': obj.lastModified.toUTCString(),
    'Cache-Control': FILE_CACHE_CONTROL,
    'Accept-Ranges': 'bytes',
    // Media only: never let a browser sniff a stored file into something executable.
    'X-Content-Type-Options': 'nosniff',
  }

  const inm = ctx.headers['if-none-match']
  const ims = ctx.headers['if-modified-since']
  const notModified = inm !== undefined
    ? noneMatch(inm, obj.etag)
    : ims !== undefined && Number.isFinite(Date.parse(ims)) && Math.floor(obj.lastModified.getTime() / 1000) * 1000 <= Date.parse(ims)
  if (notModified) {
    writeHead(res, 304, headers, () => res.endWithoutBody())
    return { status: 304 }
  }

  let range = ctx.headers.range !== undefined && rangeStillValid(ctx.headers['if-range'], obj)
    ? parseRange(ctx.headers.range, obj.size)
    : null
  if (range === 'unsatisfiable') {
    headers['Content-Range'] = `bytes */${obj.size}`
    writeHead(res, 416, headers, () => res.end())
    return { status: 416 }
  }
  if (range !== null && range.start === 0 && range.end === obj.size - 1) range = null
  const status = range ? 206 : 200
  if (range) headers['Content-Range'] = `bytes ${range.start}-${range.end}/${obj.size}`
  const length = range ? range.end - range.start + 1 : obj.size
  if (ctx.method === 'HEAD') {
    writeHead(res, status, headers, () => res.endWithoutBody(length))
    return { status }
  }

  let stream: Readable
  try {
    stream = await ctx.services.storage.read(obj.key, range ?? undefined)
  } catch {
    // Deleted between head and read (the sweeper): nothing has been written yet.
    if (!ctx.aborted()) writeHead(res, 404, { ...headers, 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'no-store' }, () => res.end(JSON.stringify(new ApiError('NOT_FOUND', 'No such file').toJSON())))
    return { status: 404 }
  }
  if (ctx.aborted()) { stream.destroy(); return { status: -1 } }
  const complete = await streamBody(ctx, res, stream, status, headers, length)
  return { status: complete ? status : -1 }
}

/** Status line and headers, then `end` inside the same cork (we are past an await). */
function writeHead (res: HttpResponse, status: number, headers: Record<string, string>, end?: () => void): void {
  res.cork(() => {
    res.writeStatus(statusLine(status))
    for (const k in headers) res.writeHeader(k, headers[k])
    end?.()
  })
}

/**
 * Streams `length` bytes of `stream` as the body. uWS `tryEnd` writes what the socket takes
 * and keeps nothing else: on backpressure the file stream is paused and the rest of the chunk
 * is offered again from `onWritable`, counted from the response's write offset.
 * Resolves true once the whole body went out, false on abort or a read error.
 */
function streamBody (
  ctx: RouteContext, res: HttpResponse, stream: Readable, status: number, headers: Record<string, string>, length: number
): Promise<boolean> {
  return new Promise((resolve) => {
    let settled = false
    let headWritten = false
    const settle = (ok: boolean) => {
      if (settled) return
      settled = true
      stream.destroy()
      resolve(ok)
    }
    ctx.onAborted(() => settle(false))

    const send = (chunk: Buffer): [boolean, boolean] => {
      let result: [boolean, boolean] = [true, false]
      res.cork(() => {
        if (!headWritten) {
          headWritten = true
          res.writeStatus(statusLine(status))
          for (const k in headers) res.writeHeader(k, headers[k])
        }
        result = res.tryEnd(chunk, length)
      })
      return result
    }

    if (length === 0) {
      res.cork(() => {
        res.writeStatus(statusLine(status))
        for (const k in headers) res.writeHeader(k, headers[k])
        res.end()
      })
      settle(true)
      return
    }

    let ended = false
    let waiting = false
    const cut = () => {
      // The object ended early or failed mid-body: the length promised cannot be kept.
      if (!settled && !ctx.aborted()) res.cork(() => res.close())
      settle(false)
    }
    stream.on('data', (chunk: Buffer) => {
      if (settled) return
      if (ctx.aborted()) { settle(false); return }
      const offset = res.getWriteOffset()
      const [ok, done] = send(chunk)
      if (done) { settle(true); return }
      if (!ok) {
        waiting = true
        stream.pause()
        res.onWritable((at) => {
          if (settled) return true
          const [ok2, done2] = res.tryEnd(chunk.subarray(at - offset), length)
          if (done2) settle(true)
          else if (ok2) {
            waiting = false
            if (ended) cut()
            else stream.resume()
          }
          return ok2
        })
      }
    })
    stream.on('error', cut)
    stream.on('end', () => {
      ended = true
      if (!waiting) cut() // every byte was offered yet the response is not complete
    })
  })
}

const fileRoute: Route = {
  method: 'GET',
  head: true,
  path: '/v1/files/*',
  auth: 'public',
  rawBody: true,
  summary: 'Download stored media (uploads and results); supports Range, ETag and long caching. The URLs the service hands out are /files/<key> at the root; /v1/files/<key> serves the same bytes, with the key\'s slashes as they are or percent-encoded',
  tag: 'Files',
  errors: ['NOT_FOUND'],
  // Keys the service writes are 2 to 4 segments deep (results/<id>.<ext>, results/sim/<hash>.<ext>,
  // thumbs/<hash>.jpg, uploads/<yyyy>/<mm>/<id>.<ext>): each depth is declared with raw slashes.
  restShapes: [':dir/:name', ':dir/:subdir/:name', ':dir/:subdir/:leafdir/:name'],
  headers: [
    { name: 'Range', in: 'header', required: false, description: 'One byte range (`bytes=0-1023`, `bytes=-500`)', schema: { type: 'string' } },
    { name: 'If-None-Match', in: 'header', required: false, schema: { type: 'string' } },
    { name: 'If-Modified-Since', in: 'header', required: false, schema: { type: 'string' } },
    { name: 'If-Range', in: 'header', required: false, schema: { type: 'string' } },
  ],
  extraResponses: {
    // OAS 3.1 binary content: a schema with contentMediaType and no `type` (bytes are not a JSON string).
    200: { description: 'The whole file, with its stored Content-Type', content: { '*/*': { schema: { contentMediaType: 'application/octet-stream' } } } },
    206: { description: 'Partial Content: the one range asked for (Content-Range)', content: { '*/*': { schema: { contentMediaType: 'application/octet-stream' } } } },
    304: { description: 'Not Modified (If-None-Match or If-Modified-Since matched)' },
    416: { description: 'Range Not Satisfiable (Content-Range: bytes */<size>)' },
  },
  handler: serveFile,
}

export const routes: Route[] = [
  fileRoute,
  // The URLs in upload and job answers (PUBLIC_BASE_URL/files/<key>): the same handler,
  // declared as the same operation with the root server next to /v1.
  { ...fileRoute, path: '/files/*' },
]
