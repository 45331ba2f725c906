// src/http/body.ts without a server: the request-body reader against a fake uWS response that
// throws, as uWS does, when touched after it was answered or aborted.
import t from 'tap'
import type { HttpResponse } from 'uWebSockets.js'
import { deeperThan, MAX_JSON_DEPTH, BodyClosed, RequestBody, parseJson } from '../../src/http/body.js'
import { ApiError } from '../../src/errors.js'

class FakeRes {
  onDataFn: ((ab: ArrayBuffer, last: boolean) => void) | null = null
  calls: string[] = []
  done = false
  onData (fn: (ab: ArrayBuffer, last: boolean) => void): void { this.onDataFn = fn }
  pause (): void { this.touch('pause') }
  resume (): void { this.touch('resume') }
  private touch (what: string): void {
    if (this.done) throw new Error('uWS.HttpResponse must not be accessed after uWS.HttpResponse.onAborted callback, or after a successful response')
    this.calls.push(what)
  }

  /** uWS hands a chunk; it reuses the buffer afterwards (zeroed here to catch a kept view). */
  send (bytes: string | Buffer, last = false): void {
    const b = Buffer.from(bytes)
    const ab = b.buffer.slice(b.byteOffset, b.byteOffset + b.length) as ArrayBuffer
    this.onDataFn!(ab, last)
    new Uint8Array(ab).fill(0)
  }
}

const make = (declared = NaN, lingers = false) => {
  const res = new FakeRes()
  const faults: unknown[] = []
  const body = new RequestBody(res as unknown as HttpResponse, declared, lingers, (e) => faults.push(e))
  return { res, body, faults }
}

t.test('read: the whole body, copied out of uWS\'s reused buffers', async (t) => {
  const { res, body } = make()
  const p = body.read(100)
  res.send('{"a":')
  res.send('1}', true)
  t.equal((await p).toString(), '{"a":1}')
  t.equal(body.received, 7)
  t.ok(body.ended)
})

t.test('read: crossing the cap rejects PAYLOAD_TOO_LARGE at once and drops the rest', async (t) => {
  const { res, body } = make()
  const p = body.read(10)
  res.send('0123456789')
  res.send('x')
  const err = await p.catch(e => e)
  t.ok(err instanceof ApiError)
  t.equal(err.code, 'PAYLOAD_TOO_LARGE')
  res.send('more', true)
  t.equal(body.received, 15, 'still counted')
  t.same(res.calls, [], 'nothing paused')
})

t.test('stream: paused while the buffer is full, resumed when read', async (t) => {
  const { res, body } = make()
  const r = body.stream()
  const big = Buffer.alloc(300 * 1024, 1)
  res.send(big)
  t.same(res.calls, ['pause'], 'over the high-water mark: paused')
  const got: Buffer[] = []
  r.on('data', (c: Buffer) => got.push(c))
  await new Promise(resolve => setImmediate(resolve))
  t.same(res.calls, ['pause', 'resume'])
  res.send('end', true)
  await new Promise(resolve => r.on('end', resolve))
  t.equal(Buffer.concat(got).length, big.length + 3)
})

t.test('after settle, the response is never touched again', async (t) => {
  const { res, body } = make()
  const r = body.stream()
  res.send(Buffer.alloc(300 * 1024))
  t.same(res.calls, ['pause'])
  res.done = true // answered
  body.settle(false)
  r.resume() // a consumer reading now would resume: it must not reach uWS
  await new Promise(resolve => setImmediate(resolve))
  t.same(res.calls, ['pause'], 'no resume after the answer')
})

t.test('an aborted request rejects the read and errors the stream', async (t) => {
  const a = make()
  const p = a.body.read(100)
  a.res.send('{')
  a.res.done = true
  a.body.settle(true)
  const e = await p.catch(x => x)
  t.equal(e.code, 'VALIDATION_ERROR')
  const b = make()
  const r = b.body.stream()
  const err = new Promise(resolve => r.on('error', resolve))
  b.body.settle(true)
  t.ok(await err)
})

t.test('drop: resolves true when the body ends, false past its byte budget', async (t) => {
  const a = make(1000, true)
  a.body.stream()
  const d = a.body.drop(1 << 20, 5000)
  a.res.send(Buffer.alloc(400))
  a.res.send(Buffer.alloc(600), true)
  t.equal(await d, true)
  const b = make(NaN, true)
  const d2 = b.body.drop(1000, 5000)
  b.res.send(Buffer.alloc(600))
  b.res.send(Buffer.alloc(600))
  t.equal(await d2, false, 'past the budget: answered without the rest')
})

t.test('drop: resolves false once its time is up', async (t) => {
  const { body } = make(NaN, true)
  t.equal(await body.drop(1 << 20, 30), false)
})

t.test('a consumer that throws inside a chunk is reported, not thrown out of the uWS callback', async (t) => {
  const { res, body, faults } = make()
  const r = body.stream()
  r.on('data', () => { throw new Error('consumer bug') })
  r.on('error', () => {})
  // Flowing from the next tick on: from then a chunk is handed to 'data' inside push().
  await new Promise(resolve => setImmediate(resolve))
  t.doesNotThrow(() => res.send('chunk'))
  t.equal(faults.length, 1)
  t.match(String(faults[0]), /consumer bug/)
  t.doesNotThrow(() => res.send('more', true), 'later chunks are dropped')
  t.ok(r.destroyed)
})

t.test('discard: drops the rest without waiting; the stream consumer gets BodyClosed', async (t) => {
  const { res, body } = make()
  const r = body.stream()
  const err = new Promise<unknown>(resolve => r.on('error', resolve))
  body.discard()
  t.ok(await err instanceof BodyClosed)
  res.send('rest', true)
  t.equal(body.received, 4)
})

t.test('parseJson: U+0000 found at any depth allowed', async (t) => {
  let deep = '"\\u0000"'
  for (let i = 0; i < MAX_JSON_DEPTH; i++) deep = `[${deep}]`
  const e = (() => { try { parseJson(Buffer.from(deep)); return null } catch (x) { return x as ApiError } })()
  t.equal(e?.code, 'VALIDATION_ERROR')
  t.match(e?.toJSON(), { details: [{ path: new RegExp(`^(\\/0){${MAX_JSON_DEPTH}}$`) }] })
  const k = (() => { try { parseJson(Buffer.from('{"a":{"b\\u0000":1},"c":"\\u0000"}')); return null } catch (x) { return x as ApiError } })()
  t.match(k?.toJSON(), { details: [{ path: '/a/b\u0000' }] }, 'a key is reported where it stands, before a later value')
  t.same(parseJson(Buffer.from('{"a":[1,{"b":"x"}]}')), { a: [1, { b: 'x' }] })
})

const refusal = (text: string) => { try { parseJson(Buffer.from(text)); return null } catch (x) { return (x as ApiError).toJSON() as any } }

t.test('parseJson: nesting deeper than MAX_JSON_DEPTH is a 400 before anything walks it; brackets inside strings do not count', async (t) => {
  const nest = (n: number) => '['.repeat(n) + ']'.repeat(n)
  t.same(parseJson(Buffer.from(nest(MAX_JSON_DEPTH))), JSON.parse(nest(MAX_JSON_DEPTH)), 'at the bound: parsed')
  for (const n of [MAX_JSON_DEPTH + 1, 5000, 20000]) {
    t.match(refusal(nest(n)), { code: 'VALIDATION_ERROR', message: `The body nests arrays and objects more than ${MAX_JSON_DEPTH} deep` }, `${n} deep`)
  }
  t.match(refusal(`{"multi_prompt":[${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}]}`), { code: 'VALIDATION_ERROR' }, 'objects too')
  const quoted = JSON.stringify({ s: '[{'.repeat(500), t: '\\"[[[' })
  t.same(parseJson(Buffer.from(quoted)), JSON.parse(quoted), 'brackets in strings, escaped quotes included')
  t.equal(deeperThan('[[["]]]]]]"]]]', 3), false)
  t.equal(deeperThan('[[["\\"[[[["]]]]', 3), false, 'an escaped quote does not end the string (else the four brackets would count)')
})

t.test('parseJson: a lone surrogate escape (PostgreSQL refuses it) is a 400 naming where it stands; a pair is fine', async (t) => {
  t.match(refusal('{"prompt":"\\ud800 kite"}'), { code: 'VALIDATION_ERROR', details: [{ path: '/prompt', message: 'must not contain a lone surrogate' }] })
  t.match(refusal('{"a":[{"b":"x\\udfff"}]}'), { details: [{ path: '/a/0/b' }] }, 'a low one alone')
  t.match(refusal('{"multi_prompt":[{"\\ud800":"\\udfff"}]}'), { details: [{ path: '/multi_prompt/0/\ud800' }] }, 'a key')
  t.match(refusal('{"p":"\\udc00\\ud800"}'), { code: 'VALIDATION_ERROR' }, 'a pair in the wrong order')
  t.same(parseJson(Buffer.from('{"p":"\\ud83d\\ude00 ok","q":"\\u00e9"}')), { p: '\ud83d\ude00 ok', q: '\u00e9' }, 'an escaped pair and other escapes')
})
