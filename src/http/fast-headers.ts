/**
 * The header block of an answer from memory (docs/architecture.md "Request pipeline"), written
 * into one preallocated byte buffer: `<request id>\r\nX-RateLimit-Limit: <n>\r\nX-RateLimit-Remaining: <n>`
 * (the rate lines only when the request was counted in a window) followed by the route's constant
 * tail, handed to uWS as the value of one X-Request-Id header line. uWS copies a typed array's
 * bytes as they are (a string would be converted into a temporary UTF-8 copy), and the view of
 * each length is made once, so a request allocates nothing here. Only our own numbers, constants
 * and request ids that passed the server's id check (ASCII) are ever written.
 */
const CAP = 1024
/**
 * The longest tail a block can carry: a client id is at most 128 characters and the rate lines
 * with their numbers under 80 bytes. A route whose tail is longer is answered by the full pipeline.
 */
export const MAX_TAIL = CAP - 256
const ab = new ArrayBuffer(CAP)
const bytes = new Uint8Array(ab)
const views: Array<Uint8Array | undefined> = []

/**
 * Request header names the synchronous paths read, as bytes: uWS converts a string argument of
 * getHeader into a temporary UTF-8 copy on every call (~100 ns a lookup on the 2-core bench
 * machine) and reads a typed array's bytes in place (~55 ns).
 */
export const HEADER_NAMES = {
  apiKey: Buffer.from('x-api-key'),
  authorization: Buffer.from('authorization'),
  requestId: Buffer.from('x-request-id'),
  accept: Buffer.from('accept'),
  ifNoneMatch: Buffer.from('if-none-match'),
} as const

/** Name of the header line the block is the value of, as bytes (no conversion per call). */
export const REQUEST_ID_HEADER = Buffer.from('X-Request-Id')

const LIMIT = Buffer.from('\r\nX-RateLimit-Limit: ')
const REMAINING = Buffer.from('\r\nX-RateLimit-Remaining: ')

/**
 * Generated request ids `req_<prefix><counter base 36>`, kept as bytes and incremented in place:
 * the digits are rebuilt from the number only when some other path took a counter value.
 */
export class IdDigits {
  private readonly buf = new Uint8Array(64)
  private len = 0
  private num = -1

  constructor (private readonly head: string) {}

  /** The id of counter `n` as text (the full pipeline's headers, log lines). */
  text (n: number): string { return this.head + n.toString(36) }

  /** Copies the id of counter `n` into `out` at `pos`; returns the position after it. */
  write (n: number, out: Uint8Array, pos: number): number {
    if (n === this.num + 1 && this.len > 0) this.increment()
    else {
      const s = this.head + n.toString(36)
      this.len = s.length
      for (let i = 0; i < s.length; i++) this.buf[i] = s.charCodeAt(i)
    }
    this.num = n
    const b = this.buf
    for (let i = 0; i < this.len; i++) out[pos + i] = b[i]
    return pos + this.len
  }

  private increment (): void {
    const b = this.buf
    const start = this.head.length
    let i = this.len - 1
    for (; i >= start; i--) {
      const d = b[i]
      if (d === 57) { b[i] = 97; return } // '9' -> 'a'
      if (d !== 122) { b[i] = d + 1; return } // 'z' carries
      b[i] = 48
    }
    // Every digit carried: one more digit in front ('zz' + 1 = '100').
    b.copyWithin(start + 1, start, this.len)
    b[start] = 49
    this.len++
  }
}

function writeAscii (s: string, pos: number): number {
  for (let i = 0; i < s.length; i++) bytes[pos + i] = s.charCodeAt(i)
  return pos + s.length
}

function writeUint (n: number, pos: number): number {
  if (!Number.isSafeInteger(n) || n < 0) return writeAscii(String(n), pos)
  if (n < 10) { bytes[pos] = 48 + n; return pos + 1 }
  let digits = 1
  for (let x = n; x >= 10; x = Math.floor(x / 10)) digits++
  for (let i = pos + digits - 1; i >= pos; i--) { bytes[i] = 48 + (n % 10); n = Math.floor(n / 10) }
  return pos + digits
}

/**
 * The block for a generated id (`given` null: counter `n` from `ids`) or the client's own
 * id, with the rate numbers (none when `limit` is negative: a public route) and `tail` (constant
 * header lines, starting with `\r\n`, at most MAX_TAIL bytes). Valid until the next call: uWS
 * copies it at once.
 */
export function headerBlock (ids: IdDigits, n: number, given: string | null, limit: number, remaining: number, tail: Uint8Array): Uint8Array {
  let pos: number
  if (given === null) pos = ids.write(n, bytes, 0)
  else pos = writeAscii(given, 0)
  if (limit >= 0) {
    bytes.set(LIMIT, pos); pos += LIMIT.length
    pos = writeUint(limit, pos)
    bytes.set(REMAINING, pos); pos += REMAINING.length
    pos = writeUint(remaining, pos)
  }
  bytes.set(tail, pos); pos += tail.length
  return (views[pos] ??= new Uint8Array(ab, 0, pos))
}
