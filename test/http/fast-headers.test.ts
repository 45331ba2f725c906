// The fast path's header block (src/http/fast-headers.ts): generated ids incremented in place
// must read exactly as `req_<prefix><counter base 36>`, across carries and jumps.
import t from 'tap'
import { headerBlock, IdDigits } from '../../src/http/fast-headers.js'

const tail = Buffer.from('\r\nAccess-Control-Allow-Origin: *')
const text = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('latin1')

t.test('generated ids follow the counter through carries, new digits and jumps', async (t) => {
  const ids = new IdDigits('req_abcd1234')
  const seq = [...Array.from({ length: 1400 }, (_, i) => i + 1), 46655, 46656, 46657, 10, 11, 2 ** 40, 2 ** 40 + 1]
  let bad = 0
  for (const n of seq) {
    const got = text(headerBlock(ids, n, null, 60, 59, tail))
    const want = `req_abcd1234${n.toString(36)}\r\nX-RateLimit-Limit: 60\r\nX-RateLimit-Remaining: 59${tail.toString()}`
    if (got !== want) { bad++; if (bad < 5) t.equal(got, want, `counter ${n}`) }
  }
  t.equal(bad, 0, `${seq.length} ids as toString(36) writes them`)
})

t.test('a client id and any rate numbers are written as given', async (t) => {
  const ids = new IdDigits('req_x')
  const id = 'A'.repeat(128)
  t.equal(text(headerBlock(ids, NaN, id, 1_000_000_000, 0, tail)), `${id}\r\nX-RateLimit-Limit: 1000000000\r\nX-RateLimit-Remaining: 0${tail.toString()}`)
  t.equal(text(headerBlock(ids, NaN, 'r-1', 7, 1234567, tail)), `r-1\r\nX-RateLimit-Limit: 7\r\nX-RateLimit-Remaining: 1234567${tail.toString()}`)
  const a = headerBlock(ids, NaN, 'same-length', 9, 9, tail)
  t.equal(headerBlock(ids, NaN, 'same-lengtH', 9, 9, tail), a, 'one view per length: nothing allocated per request')
})
