import type { Writable } from 'node:stream'
import { finished } from 'node:stream/promises'
import type { PendingQuery, Row } from 'postgres'
/**
 * PostgreSQL's binary COPY format (https://www.postgresql.org/docs/current/sql-copy.html,
 * "Binary Format"), written into one byte buffer (the metering flush). A row is
 * `int16 field count` then per field `int32 length` (-1: NULL) and the value in the type's
 * binary send format. No text conversion on either side: numbers are written as bytes, a
 * timestamp is an int64 of microseconds since 2000-01-01, and text needs no escaping.
 */
const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1')
/** 2000-01-01T00:00:00Z in Unix milliseconds: PostgreSQL's timestamp epoch. */
const PG_EPOCH_MS = 946_684_800_000
const TWO_32 = 4_294_967_296

export class CopyBinary {
  buf: Buffer
  /** The same bytes as `buf`: DataView's setters compile to plain stores (Buffer's check their arguments). */
  private dv: DataView
  pos = 0

  constructor (capacity = 65536) {
    this.buf = Buffer.alloc(capacity)
    this.dv = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength)
  }

  /** The file header (signature, flags, no extension): once, before the first row. */
  header (): void {
    this.fit(19)
    SIGNATURE.copy(this.buf, this.pos); this.pos += SIGNATURE.length
    this.dv.setInt32(this.pos, 0); this.dv.setInt32(this.pos + 4, 0); this.pos += 8
  }

  /** The file trailer: once, after the last row. */
  trailer (): void { this.fit(2); this.dv.setInt16(this.pos, -1); this.pos += 2 }

  /** Starts a row of `fields` columns; `bytes` bounds what the row's fields need (the buffer grows to fit). */
  row (fields: number, bytes: number): void {
    this.fit(2 + bytes)
    this.dv.setInt16(this.pos, fields); this.pos += 2
  }

  null (): void { this.dv.setInt32(this.pos, -1); this.pos += 4 }

  int32 (v: number): void {
    const d = this.dv
    d.setInt32(this.pos, 4); d.setInt32(this.pos + 4, v); this.pos += 8
  }

  /** A bigint column from a safe integer (NaN: NULL). */
  int64 (v: number): void {
    if (Number.isNaN(v)) { this.null(); return }
    const hi = Math.floor(v / TWO_32)
    const d = this.dv
    d.setInt32(this.pos, 8); d.setInt32(this.pos + 4, hi); d.setUint32(this.pos + 8, v - hi * TWO_32)
    this.pos += 12
  }

  /** A timestamptz column from Unix milliseconds (kept to the microsecond). */
  timestamp (ms: number): void { this.int64(Math.round((ms - PG_EPOCH_MS) * 1000)) }

  float4 (v: number): void {
    const d = this.dv
    d.setInt32(this.pos, 4); d.setFloat32(this.pos + 4, v); this.pos += 8
  }

  float8 (v: number): void {
    const d = this.dv
    d.setInt32(this.pos, 8); d.setFloat64(this.pos + 4, v); this.pos += 12
  }

  /** Bytes already in field form (length prefix included, see `field`). */
  raw (bytes: Uint8Array): void { this.buf.set(bytes, this.pos); this.pos += bytes.length }

  /** A text column as UTF-8; `maxBytes` must have been reserved through `row`. */
  text (s: string): void {
    const n = this.buf.write(s, this.pos + 4, 'utf8')
    this.dv.setInt32(this.pos, n); this.pos += 4 + n
  }

  /**
   * A text column `head` + `n` in base 36 (a generated request id, `req_<prefix><counter>`):
   * the digits are written as bytes, no string is built.
   */
  textBase36 (head: Uint8Array, n: number): void {
    const b = this.buf
    let digits = 1
    for (let x = n; x >= 36; x = Math.floor(x / 36)) digits++
    this.dv.setInt32(this.pos, head.length + digits)
    b.set(head, this.pos + 4)
    let i = this.pos + 4 + head.length + digits - 1
    for (let d = 0; d < digits; d++) {
      const r = n % 36
      b[i--] = r < 10 ? 48 + r : 87 + r
      n = Math.floor(n / 36)
    }
    this.pos += 4 + head.length + digits
  }

  /** Hands the bytes written so far over (a fresh buffer takes their place) and starts again. */
  take (): Buffer {
    const out = this.buf.subarray(0, this.pos)
    this.use(Buffer.allocUnsafe(this.buf.length))
    this.pos = 0
    return out
  }

  private fit (n: number): void {
    if (this.pos + n <= this.buf.length) return
    const b = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n))
    this.buf.copy(b, 0, 0, this.pos)
    this.use(b)
  }

  private use (b: Buffer): void {
    this.buf = b
    this.dv = new DataView(b.buffer, b.byteOffset, b.byteLength)
  }
}

/** A text value as a COPY binary field (length prefix and UTF-8 bytes), built once and reused row after row. */
export function field (s: string): Buffer {
  const body = Buffer.from(s, 'utf8')
  const f = Buffer.allocUnsafe(4 + body.length)
  f.writeInt32BE(body.length, 0)
  body.copy(f, 4)
  return f
}

/** Upper bound of the bytes `text(s)` writes. */
export const textBytes = (s: string): number => 4 + 3 * s.length

/** A `COPY ... FROM STDIN` in progress: write to `stream`, then `done()` once it is ended. */
export interface CopyIn {
  stream: Writable
  /** Settles when the server took the rows, or rejects with its error. */
  done: () => Promise<void>
}

/**
 * Starts `COPY ... FROM STDIN` (`query`, not yet awaited). postgres.js 3.4.9 never finishes
 * the writable when the server refuses the COPY after its last byte (porsager/postgres#1173: a
 * trigger, a constraint, a cancelled statement): the error goes to the query's reject, by then
 * settled, and the transaction waits forever holding its connection. The error is routed to
 * `done` here, so a failed COPY fails (and rolls back) its transaction.
 */
export async function copyIn (query: PendingQuery<Row[]>): Promise<CopyIn> {
  const q = query as unknown as { reject: (err: unknown) => void }
  const settle = q.reject
  let refuse!: (err: unknown) => void
  const refused = new Promise<never>((_resolve, reject) => { refuse = reject })
  refused.catch(() => {})
  q.reject = (err) => { settle(err); refuse(err) }
  const stream = await query.writable()
  return { stream, done: () => Promise.race([finished(stream), refused]) }
}
