import { Readable, Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { downloadClient } from '../net/agents.js'
import { get } from '../net/get.js'
import type { Storage } from '../storage/storage.js'
import { sniff } from './sniff.js'

/**
 * Provider results into our storage (docs/providers.md "Routing", Results): every output
 * is streamed from the provider's URL into storage before the job turns completed, so
 * result_url outlives the upstream copy. Downloads follow the webhook address rules (https,
 * public addresses only, checked on the connected socket; hosts in WEBHOOK_ALLOWLIST may be
 * private and plain http), a size cap, a magic-byte check of the kind, a timeout, retries.
 */
export interface ResultRules {
  allowlist: readonly string[]
  /** Largest result accepted, bytes (RESULT_MAX_BYTES, default 2 GiB). */
  maxBytes: number
  /**
   * Whole download, ms (RESULT_TIMEOUT_MS, default 10 min): checked as each chunk of the body
   * arrives (no timer per download), so a body that stops altogether ends at the client's body
   * timeout (60 s) at the latest: a download lasts at most timeoutMs + 60 s.
   */
  timeoutMs: number
  /** Attempts per output before the job's own backoff takes over. */
  attempts: number
}

export class ResultRejected extends Error {
  override name = 'ResultRejected'
}

const KIND_MIME: Record<string, RegExp> = { video: /^video\//, extend: /^video\//, image: /^image\//, audio: /^audio\// }

/** Stores one output under `results/{base}.{ext}`; answers our URL and the stored type. */
export async function storeResult (storage: Storage, base: string, kind: string, url: string, rules: ResultRules): Promise<{
  url: string; key: string; contentType: string; size: number
}> {
  let last: unknown
  for (let i = 0; i < rules.attempts; i++) {
    try {
      return await fetchOnce(storage, base, kind, url, rules)
    } catch (err) {
      last = err
      if (err instanceof ResultRejected) throw err // a wrong type or an oversized file does not get better
      if (i + 1 < rules.attempts) await new Promise(resolve => setTimeout(resolve, 250 * 4 ** i))
    }
  }
  throw last
}

/**
 * A result whose declared size is at most this is read whole and stored from one buffer (most
 * images and audio clips): no stream pipeline, one write. Larger or undeclared ones stream.
 */
export const BUFFERED_MAX = 8 * 1024 * 1024

/** The download ran past its whole-download deadline (retried like any failed download). */
export class ResultTimeout extends Error {
  override name = 'ResultTimeout'
  constructor (timeoutMs: number) { super(`result download took longer than ${timeoutMs} ms`) }
}

/** A body read whole (its declared length within BUFFERED_MAX): its kind checked, then stored. */
async function storeBuffered (storage: Storage, base: string, kind: string, data: Buffer): Promise<{
  url: string; key: string; contentType: string; size: number
}> {
  const ft = await sniff(data.subarray(0, 4100))
  const want = KIND_MIME[kind] ?? /./
  if (!ft || !want.test(ft.mime)) throw new ResultRejected(`result content is ${ft?.mime ?? 'unrecognised'}, not a ${kind} file`)
  const key = `results/${base}.${ft.ext}`
  await storage.put(key, data, ft.mime)
  return { url: storage.url(key), key, contentType: ft.mime, size: data.length }
}

async function fetchOnce (storage: Storage, base: string, kind: string, url: string, rules: ResultRules): Promise<{
  url: string; key: string; contentType: string; size: number
}> {
  const deadline = Date.now() + rules.timeoutMs
  let target = url
  for (let hop = 0; ; hop++) {
    let u: URL
    try { u = new URL(target) } catch { throw new ResultRejected(`result URL is not a URL: ${target.slice(0, 200)}`) }
    if (u.protocol !== 'https:' && u.protocol !== 'http:') throw new ResultRejected(`result URL scheme ${u.protocol} not allowed`)
    const bufferMax = Math.min(BUFFERED_MAX, rules.maxBytes)
    const res = await get(u, {
      client: downloadClient(rules.allowlist),
      headersTimeout: 30_000,
      bodyTimeout: 60_000,
      bufferMax,
      check: (size, declared) => {
        if (Date.now() > deadline) return new ResultTimeout(rules.timeoutMs)
        // A body longer than it declared is cut at the cap like a streamed one.
        return size > bufferMax ? new ResultRejected(`result exceeds its declared ${declared} bytes`) : null
      },
    })
    const location = res.headers.location
    if (res.status >= 300 && res.status < 400 && location && hop < 3) {
      target = new URL(String(location), u).toString()
      continue
    }
    if (res.status !== 200) throw new Error(`fetching the provider result answered ${res.status}`)
    if (res.declared > rules.maxBytes) {
      const e = new ResultRejected(`result is ${res.declared} bytes, over the ${rules.maxBytes} byte cap`)
      res.abort(e)
      throw e
    }
    if (res.whole !== null) return storeBuffered(storage, base, kind, await res.whole)
    const body = res.stream!
    // The head of the body decides the type (magic bytes); the rest streams into storage.
    const iter = body[Symbol.asyncIterator]()
    const head: Buffer[] = []
    let headLen = 0
    let done = false
    while (headLen < 4100) {
      const n = await iter.next()
      if (n.done) { done = true; break }
      if (Date.now() > deadline) { body.destroy(); throw new ResultTimeout(rules.timeoutMs) }
      head.push(n.value as Buffer)
      headLen += (n.value as Buffer).length
    }
    const first = Buffer.concat(head)
    const ft = await sniff(first)
    const want = KIND_MIME[kind] ?? /./
    if (!ft || !want.test(ft.mime)) {
      body.destroy()
      throw new ResultRejected(`result content is ${ft?.mime ?? 'unrecognised'}, not a ${kind} file`)
    }
    let size = 0
    const cap = new Transform({
      transform (chunk: Buffer, _enc, cb) {
        size += chunk.length
        if (size > rules.maxBytes) cb(new ResultRejected(`result exceeds the ${rules.maxBytes} byte cap`))
        else if (Date.now() > deadline) cb(new ResultTimeout(rules.timeoutMs))
        else cb(null, chunk)
      },
    })
    const rest = Readable.from((async function * () {
      yield first
      if (done) return
      for (;;) { const n = await iter.next(); if (n.done) return; yield n.value as Buffer }
    })())
    const key = `results/${base}.${ft.ext}`
    const put = storage.put(key, cap, ft.mime).catch((err) => { cap.destroy(err); throw err })
    await Promise.all([pipeline(rest, cap), put])
    return { url: storage.url(key), key, contentType: ft.mime, size }
  }
}
