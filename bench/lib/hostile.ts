/**
 * Hostile clients (docs/operations.md "Hostile input"), shared by the chaos suite's fuzz run and
 * the tests: oversized bodies sent the ways real clients send them, a PNG whose compressed
 * text chunks inflate far past its size, and uploads cut off mid-body.
 */
import { request } from 'node:http'
import { connect } from 'node:net'
import { deflateSync } from 'node:zlib'

export interface SendResult {
  /** HTTP status, or 0 when no answer was read (the connection was cut or an error). */
  status: number
  body: string
  /** The client's write error, if any (EPIPE, ECONNRESET). */
  writeError: string | null
}

export interface OversizedOptions {
  bytes: number
  /** The body to send (its first `bytes` bytes; `a`s when absent). */
  body?: Buffer
  /** Transfer-Encoding: chunked instead of Content-Length. */
  chunked?: boolean
  /** Connection: close (Node's http with agent: false, HTTP/1.0 clients, many proxies). */
  close?: boolean
  headers?: Record<string, string>
  /** Bytes per write and pause between writes (a steady uploader); default one write as fast as the socket takes. */
  chunk?: number
  everyMs?: number
  capMs?: number
}

/**
 * Sends a body of `bytes` bytes with Node's http client and reads the answer after the whole
 * body was written (or the write failed): what `http.request` users, proxies and HTTP/1.0
 * clients do. A server that closes while the client still writes shows as `writeError`.
 */
export function sendOversized (base: string, method: string, path: string, o: OversizedOptions): Promise<SendResult> {
  const u = new URL(path, base)
  const headers: Record<string, string> = { 'content-type': 'application/json', ...o.headers }
  if (o.chunked) headers['transfer-encoding'] = 'chunked'
  else headers['content-length'] = String(o.bytes)
  if (o.close) headers.connection = 'close'
  return new Promise((resolve) => {
    let writeError: string | null = null
    let settled = false
    const done = (r: SendResult) => { if (!settled) { settled = true; clearTimeout(cap); resolve(r) } }
    const req = request({ host: u.hostname, port: u.port, method, path: u.pathname + u.search, headers, agent: o.close ? false : undefined })
    const cap = setTimeout(() => { req.destroy(new Error('client cap reached')) }, o.capMs ?? 30_000)
    req.on('response', (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => { body += d })
      res.on('end', () => done({ status: res.statusCode ?? 0, body, writeError }))
      res.on('error', () => done({ status: res.statusCode ?? 0, body, writeError }))
    })
    req.on('error', (e: NodeJS.ErrnoException) => {
      writeError = e.code ?? e.message
      // An answer may still arrive after a write error: give it a moment through 'response'.
      setTimeout(() => done({ status: 0, body: '', writeError }), 200)
    })
    const step = o.chunk ?? o.bytes
    const piece = Buffer.alloc(Math.min(step, o.bytes), 0x61)
    let sent = 0
    const pump = (): void => {
      while (sent < o.bytes && !req.destroyed) {
        const n = Math.min(piece.length, o.bytes - sent)
        const ok = req.write(o.body !== undefined ? o.body.subarray(sent, sent + n) : n === piece.length ? piece : piece.subarray(0, n))
        sent += n
        if (sent >= o.bytes) { req.end(); return }
        if (o.everyMs !== undefined) { setTimeout(pump, o.everyMs); return }
        if (!ok) { req.once('drain', pump); return }
      }
    }
    pump()
  })
}

/** A PNG chunk: length, type, data, CRC (the CRC is not checked by the reader, zeros do). */
function pngChunk (type: string, data: Buffer): Buffer {
  const len = Buffer.alloc(4)
  len.writeUInt32BE(data.length)
  return Buffer.concat([len, Buffer.from(type, 'latin1'), data, Buffer.alloc(4)])
}

/**
 * A small valid PNG (1x1, grey) followed by `chunks` zTXt chunks, each inflating to
 * `inflatedBytes` of text: a decompression bomb for a metadata reader without a total budget
 * (3,000 x 1 MiB fit in ~3 MB).
 */
export function pngTextBomb (chunks: number, inflatedBytes: number): Buffer {
  const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  const ihdr = Buffer.alloc(13)
  ihdr.writeUInt32BE(1, 0); ihdr.writeUInt32BE(1, 4); ihdr[8] = 8; ihdr[9] = 0
  const idat = deflateSync(Buffer.from([0, 0x80]))
  const bomb = pngChunk('zTXt', Buffer.concat([Buffer.from('Comment\0\0', 'latin1'), deflateSync(Buffer.alloc(inflatedBytes, 0x20), { level: 9 })]))
  const parts: Buffer[] = [sig, pngChunk('IHDR', ihdr), pngChunk('IDAT', idat)]
  for (let i = 0; i < chunks; i++) parts.push(bomb)
  parts.push(pngChunk('IEND', Buffer.alloc(0)))
  return Buffer.concat(parts)
}

/** A multipart/form-data body with `kind` and one file part. */
export function multipart (kind: string, filename: string, file: Buffer, boundary = 'hostileBoundary7MA4YWxkTrZu0gW'): { body: Buffer; contentType: string } {
  const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="kind"\r\n\r\n${kind}\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${filename}"\r\nContent-Type: application/octet-stream\r\n\r\n`)
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`)
  return { body: Buffer.concat([head, file, tail]), contentType: `multipart/form-data; boundary=${boundary}` }
}

/**
 * An upload that announces `declared` bytes, sends `sendBytes` of them and then cuts the
 * connection. Resolves once the socket is closed.
 */
export function abortedUpload (base: string, path: string, headers: Record<string, string>, declared: number, sendBytes: number): Promise<void> {
  const u = new URL(path, base)
  return new Promise((resolve) => {
    const sock = connect(Number(u.port), u.hostname, () => {
      const lines = Object.entries({ host: u.host, 'content-length': String(declared), 'content-type': 'multipart/form-data; boundary=x', ...headers }).map(([k, v]) => `${k}: ${v}`)
      sock.write(`POST ${u.pathname} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n`)
      sock.write(Buffer.alloc(sendBytes, 0x2d), () => sock.destroy())
    })
    sock.on('error', () => {})
    sock.on('close', () => resolve())
  })
}

/** Credentials that turn on the three callback routes; the upstream hosts point at a closed port. */
export const CALLBACK_ENV = {
  FAL_KEY: 'fuzz', FAL_QUEUE_URL: 'http://127.0.0.1:9/queue', FAL_JWKS_URL: 'http://127.0.0.1:9/jwks',
  REPLICATE_API_TOKEN: 'fuzz', REPLICATE_API_URL: 'http://127.0.0.1:9', REPLICATE_WEBHOOK_SECRET: 'whsec_ZnV6emZ1enpmdXp6ZnV6eg==',
  KIE_API_KEY: 'fuzz', KIE_API_URL: 'http://127.0.0.1:9', KIE_WEBHOOK_HMAC_KEY: 'fuzz',
}
