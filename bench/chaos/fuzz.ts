/**
 * Body fuzzer over every operation of /v1/openapi.json: for each request,
 * fast-check picks an operation and builds a body from its schema, each property either a
 * value of the declared type (enums, bounds, formats nearby) or arbitrary JSON, sometimes
 * not JSON at all; path parameters are random strings. Counted: answers >= 500 and answers
 * that are not the docs/api.md "Errors" envelope. Credentials: a paid key, or a session JWT for
 * session routes; operator routes get no token (they must refuse cleanly).
 *
 * Then the hostile phase (docs/operations.md "Hostile input"): a 2 MB body to every operation
 * that takes one, the provider callbacks included, with Content-Length and chunked, keep-alive
 * and `Connection: close`; PNG text-chunk decompression bombs; uploads cut off mid-body. Each
 * must be answered (never a 5xx, never a dropped connection) and the process must go on serving.
 */
import fc from 'fast-check'
import { startService } from '../lib/children.js'
import { api, createDatabase, seedAccounts } from '../lib/seed.js'
import { RAISED_TIER_LIMITS } from '../lib/stack.js'
import { abortedUpload, CALLBACK_ENV, multipart, pngTextBomb, sendOversized } from '../lib/hostile.js'
import { call, type ChaosOptions } from './common.js'


export interface FuzzOptions extends ChaosOptions { requests: number; concurrency: number; seed?: number }

type Schema = Record<string, any>
interface Op { method: string; path: string; body: Schema | null; auth: 'key' | 'session' | 'none' }

function resolve (doc: any, s: Schema | undefined): Schema | undefined {
  let x = s
  for (let i = 0; x && x.$ref && i < 10; i++) x = x.$ref.split('/').slice(1).reduce((o: any, k: string) => o?.[k], doc)
  return x
}

function valueOf (doc: any, s0: Schema | undefined, depth: number): fc.Arbitrary<unknown> {
  const junk = fc.oneof(fc.constant(null), fc.boolean(), fc.integer(), fc.double(), fc.string({ maxLength: 50 }), fc.constant(''), fc.constant('x'.repeat(5000)), fc.array(fc.integer(), { maxLength: 5 }), fc.object({ maxDepth: 2 }))
  const s = resolve(doc, s0)
  if (!s || depth > 3) return junk
  const alts = s.anyOf ?? s.oneOf
  if (alts) return fc.oneof(...alts.map((a: Schema) => valueOf(doc, a, depth + 1)), junk)
  if (s.enum) return fc.oneof(fc.constantFrom(...s.enum), junk)
  if (s.const !== undefined) return fc.oneof(fc.constant(s.const), junk)
  switch (s.type) {
    case 'string': {
      const typed = s.format === 'uri' ? fc.oneof(fc.webUrl(), fc.constantFrom('https://127.0.0.1/x', 'https://vm/x', 'http://[::1]/', 'https://example.com/a.png'))
        : s.format === 'email' ? fc.emailAddress() : fc.string({ minLength: s.minLength ?? 0, maxLength: Math.min(s.maxLength ?? 64, 300) })
      return fc.oneof(typed, typed, junk)
    }
    case 'integer': return fc.oneof(fc.integer({ min: s.minimum ?? -10, max: Math.min(s.maximum ?? 1000, 1_000_000) }), fc.constantFrom(0, -1, 2 ** 53, 1e308), junk)
    case 'number': return fc.oneof(fc.double({ noNaN: true }), junk)
    case 'boolean': return fc.oneof(fc.boolean(), junk)
    case 'array': return fc.oneof(fc.array(valueOf(doc, s.items, depth + 1), { maxLength: Math.min(s.maxItems ?? 5, 12) }), junk)
    case 'object': return objectOf(doc, s, depth + 1)
    default: return junk
  }
}

function objectOf (doc: any, s: Schema, depth: number): fc.Arbitrary<unknown> {
  const props = Object.entries(s.properties ?? {}) as Array<[string, Schema]>
  if (props.length === 0) return fc.object({ maxDepth: 2 })
  const rec: Record<string, fc.Arbitrary<unknown>> = {}
  for (const [k, v] of props) rec[k] = valueOf(doc, v, depth)
  return fc.tuple(
    fc.record(rec, { requiredKeys: [] }),
    fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 2 }),
    fc.boolean(),
  )
    .map(([o, extra, add]) => add ? { ...extra, ...o } : o)
}

export async function fuzzChaos (o: FuzzOptions): Promise<Record<string, number>> {
  const db = await createDatabase(o.databaseUrl, 'chaos_fuzz')
  const svc = await startService({ databaseUrl: db.url, env: { ...CALLBACK_ENV, TIER_LIMITS: RAISED_TIER_LIMITS, SIM_SPEED: '500', SUBMIT_TIMEOUT_MS: '300', SHARDS: '2' } })
  try {
    const [acct] = await seedAccounts(svc, 1, 100_000_000, 'fuzz')
    const login = await api(svc.url, 'POST', '/v1/auth/login', { body: { email: acct.email, password: 'bench-password-0' } })
    const jwt = login.body.token as string
    const doc = (await api(svc.url, 'GET', '/v1/openapi.json')).body
    const ops: Op[] = []
    for (const [path, item] of Object.entries<any>(doc.paths)) {
      for (const [method, op] of Object.entries<any>(item)) {
        if (!['get', 'post', 'patch', 'put', 'delete'].includes(method)) continue
        if (path.includes('/sse/') || path.includes('/events')) continue // streams stay open by design
        const body = resolve(doc, op.requestBody?.content?.['application/json']?.schema) ?? null
        const sec = JSON.stringify(op.security ?? doc.security ?? [])
        const auth = /AdminToken/.test(sec) ? 'none' : /ApiKeyHeader/.test(sec) ? 'key' : /SessionJwt/.test(sec) ? 'session' : 'none'
        // Paths hang from the /v1 server unless the path item names its own (the root only).
        const underV1 = !Array.isArray(item.servers) || item.servers.some((sv: { url: string }) => /\/v1$/.test(sv.url))
        ops.push({ method: method.toUpperCase(), path: (underV1 ? '/v1' : '') + path, body, auth })
      }
    }
    const arb = fc.integer({ min: 0, max: ops.length - 1 }).chain(i => {
      const op = ops[i]
      const params = fc.array(fc.oneof(fc.string({ maxLength: 30 }), fc.integer({ min: 100_000 }).map(String) /* never our own key id */, fc.constant('job_' + 'a'.repeat(24))), { minLength: 4, maxLength: 4 })
      const body = op.body ? fc.oneof(
        { weight: 8, arbitrary: valueOf(doc, op.body, 0) }, { weight: 1, arbitrary: fc.jsonValue() },
        { weight: 1, arbitrary: fc.string({ maxLength: 100 }).map(s => ({ __raw: s })) }
      ) : fc.constant(undefined)
      return fc.tuple(fc.constant(op), params, body)
    })
    const figures = { operations: ops.length, requests: 0, status_5xx: 0, not_envelope: 0, dropped: 0, ok_2xx: 0, client_4xx: 0 }
    const examples: string[] = []
    // Generated in batches (a seed each) so 10^5 bodies never sit in memory at once.
    let batch: Array<[Op, string[], unknown]> = []
    let batchNo = 0
    let sent = 0
    const take = (): [Op, string[], unknown] | undefined => {
      if (sent >= o.requests) return undefined
      if (batch.length === 0) batch = fc.sample(arb, { numRuns: Math.min(1000, o.requests - sent), seed: (o.seed ?? 42) + batchNo++ })
      sent++
      return batch.pop()
    }
    const worker = async () => {
      for (let s = take(); s !== undefined; s = take()) {
        const [op, params, body] = s
        let pi = 0
        const path = op.path.replace(/\{[^}]+\}/g, () => encodeURIComponent(params[pi++ % 4]))
        const raw = body && typeof body === 'object' && '__raw' in (body as object) ? String((body as { __raw: string }).__raw) : undefined
        const r = await call(svc.url, op.method, path, { key: op.auth === 'key' ? acct.key : undefined, token: op.auth === 'session' ? jwt : undefined, body: raw === undefined ? body : undefined, raw, capMs: 30_000 })
        figures.requests++
        if (r.status === 0) { figures.dropped++; if (examples.length < 5) examples.push(`${op.method} ${path}: dropped ${r.body}`) } else if (r.status >= 500) {
          figures.status_5xx++
          if (examples.length < 5) examples.push(`${op.method} ${path} ${JSON.stringify(body)?.slice(0, 200)} -> ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`)
        } else if (r.status >= 400) {
          figures.client_4xx++
          if (typeof r.body !== 'object' || r.body?.error !== true || typeof r.body?.code !== 'string') figures.not_envelope++
        } else figures.ok_2xx++
      }
    }
    await Promise.all(Array.from({ length: o.concurrency }, worker))
    for (const e of examples) o.log(`  fuzz: ${e}`)
    const hostile = await hostilePhase(svc.url, ops, acct.key, jwt, o.log)
    const alive = (await call(svc.url, 'GET', '/v1/health', { capMs: 10_000 })).status === 200 && !/uncaught exception|must not be accessed/.test(svc.stderr()) ? 1 : 0
    const violations = figures.status_5xx + figures.not_envelope + figures.dropped + hostile.hostile_5xx + hostile.hostile_dropped + (1 - alive)
    return { ...figures, ...hostile, alive, violations }
  } finally {
    await svc.stop().catch(() => {})
    await db.drop().catch(() => {})
  }
}

/** The hostile phase: every answer counted; a 5xx or a request left without one is a violation. */
async function hostilePhase (url: string, ops: Op[], key: string, jwt: string, log: (l: string) => void): Promise<Record<string, number>> {
  const f = { hostile_requests: 0, hostile_5xx: 0, hostile_dropped: 0, hostile_refused: 0 }
  const count = (what: string, status: number) => {
    f.hostile_requests++
    if (status === 0) { f.hostile_dropped++; log(`  hostile: ${what}: no answer`) } else if (status >= 500) { f.hostile_5xx++; log(`  hostile: ${what}: ${status}`) } else f.hostile_refused++
  }
  const targets = ops.filter(op => op.method !== 'GET' && op.method !== 'DELETE').map(op => ({ ...op, path: op.path.replace(/\{[^}]+\}/g, 'x1') }))
  for (const name of ['fal', 'replicate', 'kie']) targets.push({ method: 'POST', path: `/v1/providers/${name}/callback`, body: null, auth: 'none' })
  for (const op of targets) {
    const headers: Record<string, string> = op.auth === 'key' ? { 'x-api-key': key } : op.auth === 'session' ? { authorization: `Bearer ${jwt}` } : {}
    for (const v of [{}, { chunked: true }, { close: true }, { chunked: true, close: true }]) {
      const r = await sendOversized(url, op.method, op.path, { bytes: 2 * 1024 * 1024, chunk: 64 * 1024, headers, ...v })
      count(`${op.method} ${op.path} ${JSON.stringify(v)}`, r.status)
    }
  }
  const bomb = multipart('image', 'bomb.png', pngTextBomb(3000, 1024 * 1024))
  for (let i = 0; i < 3; i++) {
    const headers = { 'content-type': bomb.contentType, 'x-api-key': key }
    const r = await sendOversized(url, 'POST', '/v1/uploads', { bytes: bomb.body.length, body: bomb.body, headers })
    count('PNG text-chunk bomb', r.status)
  }
  for (let i = 0; i < 20; i++) await abortedUpload(url, '/v1/uploads', { 'x-api-key': key }, 5 * 1024 * 1024, 256 * 1024 + i * 1000)
  // After the cut-off uploads, the node still answers.
  count('health after aborted uploads', (await call(url, 'GET', '/v1/health', { capMs: 10_000 })).status)
  return f
}
