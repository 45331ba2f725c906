// The one error table (src/errors.ts, docs/architecture.md "Conventions in the code"): it must cover docs/api.md "Errors",
// every code thrown in src/, every code a route declares, /v1/openapi.json's x-error-codes, and
// the thread protocol (codes cross threads and are rebuilt on arrival).
import t from 'tap'
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ApiError, ERRORS, errorFromWire, isErrorCode } from '../src/errors.js'
import { allRoutes } from '../src/http/routes/index.js'
import { startServer } from './helpers/server.js'

/** docs/api.md "Errors", literally (SKIPPED has no HTTP status). */
const SPEC_TABLE: Record<string, number | null> = {
  VALIDATION_ERROR: 400, INVALID_PARAM: 400, INVALID_IDEMPOTENCY_KEY: 400,
  AUTH_REQUIRED: 401, INVALID_API_KEY: 401, KEY_EXPIRED: 401, TOKEN_MALFORMED: 401, TOKEN_EXPIRED: 401,
  TOKEN_INVALID: 401, USER_NOT_FOUND: 401, PASSWORD_CHANGED: 401, INVALID_TICKET: 401,
  INSUFFICIENT_CREDITS: 402,
  insufficient_scope: 403, upgrade_required: 403, ACCOUNT_BANNED: 403, NOT_ELIGIBLE: 403, CONTENT_POLICY_VIOLATION: 403,
  JOB_NOT_FOUND: 404, KEY_NOT_FOUND: 404, WEBHOOK_NOT_FOUND: 404, NOT_FOUND: 404,
  KEY_LIMIT_REACHED: 409, KEY_REVOKED: 409, WEBHOOK_LIMIT_REACHED: 409, CANNOT_CANCEL: 409,
  PAYLOAD_TOO_LARGE: 413, UNSUPPORTED_MEDIA_TYPE: 415, UNSUPPORTED_OPTION: 422,
  RATE_LIMIT_EXCEEDED: 429, concurrency_limit_reached: 429, TOO_MANY_STREAMS: 429,
  INTERNAL_ERROR: 500, PROVIDER_ERROR: 502, GATEWAY_TIMEOUT: 504, GENERATION_FAILED: 500, EXTEND_FAILED: 500,
  SKIPPED: null,
}
/** docs/api.md "Endpoints" additions. */
const DESIGN_TABLE: Record<string, number> = { INVALID_CREDENTIALS: 401, IDEMPOTENCY_CONFLICT: 409 }

const SRC = fileURLToPath(new URL('../../src/', import.meta.url))

async function tsFiles (dir: string, out: string[] = []): Promise<string[]> {
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name)
    if (e.isDirectory()) await tsFiles(p, out)
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) out.push(p)
  }
  return out
}

t.test('every SPEC.md section 7 code (and DESIGN.md addition) is in ERRORS with its status', async (t) => {
  for (const [code, status] of Object.entries(SPEC_TABLE)) {
    t.ok(isErrorCode(code), `${code} is in ERRORS`)
    if (isErrorCode(code)) t.equal(ERRORS[code].status, status ?? 0, `${code} is HTTP ${status ?? '(none)'}`)
  }
  for (const [code, status] of Object.entries(DESIGN_TABLE)) {
    t.ok(isErrorCode(code), `${code} is in ERRORS`)
    if (isErrorCode(code)) t.equal(ERRORS[code].status, status)
  }
  for (const [code, e] of Object.entries(ERRORS)) {
    t.type(e.message, 'string')
    t.ok(e.message.length > 0, `${code} has a message`)
    t.ok(e.status === 0 || (e.status >= 400 && e.status < 600), `${code} has an error status`)
  }
})

t.test('every ApiError code literal in src/**/*.ts exists in ERRORS', async (t) => {
  const files = await tsFiles(SRC)
  t.ok(files.length > 20, `scanned ${files.length} files`)
  const seen = new Map<string, string>()
  const re = /ApiError\(\s*['"`]([^'"`]+)['"`]/g
  for (const f of files) {
    const text = await readFile(f, 'utf8')
    for (const m of text.matchAll(re)) if (!seen.has(m[1])) seen.set(m[1], f.slice(SRC.length))
  }
  t.ok(seen.size >= 20, `found ${seen.size} distinct codes`)
  for (const [code, file] of seen) t.ok(isErrorCode(code), `${code} (first in src/${file}) is in ERRORS`)
})

t.test('every code a route declares in `errors` exists in ERRORS', async (t) => {
  const routes = allRoutes(() => ({}))
  t.ok(routes.length > 5)
  for (const r of routes) {
    for (const code of r.errors ?? []) t.ok(isErrorCode(code), `${r.method} ${r.path}: ${code}`)
  }
})

t.test('/v1/openapi.json x-error-codes lists every code with its status, once', async (t) => {
  const s = await startServer(t)
  const r = await s.req('GET', '/v1/openapi.json')
  t.equal(r.status, 200)
  const table = r.body['x-error-codes'] as Array<{ code: string; http_status: number | null; message: string }>
  t.ok(Array.isArray(table))
  const byCode = new Map(table.map(e => [e.code, e]))
  t.equal(byCode.size, table.length, 'no duplicates')
  for (const [code, e] of Object.entries(ERRORS)) {
    const row = byCode.get(code)
    t.ok(row, `${code} is listed`)
    t.equal(row?.http_status, e.status === 0 ? null : e.status, `${code} status`)
    t.equal(row?.message, e.message, `${code} message`)
  }
  t.equal(table.length, Object.keys(ERRORS).length, 'nothing else is listed')
  // Every per-operation error response refers to codes of the table.
  for (const [path, ops] of Object.entries(r.body.paths as Record<string, Record<string, any>>)) {
    for (const [method, op] of Object.entries(ops)) {
      if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue // path-level `servers`, `parameters`
      for (const [status, resp] of Object.entries(op.responses as Record<string, any>)) {
        if (Number(status) < 400 || resp.content?.['application/json']?.schema?.$ref !== '#/components/schemas/Error') continue
        for (const code of String(resp.description).split(', ')) {
          t.equal(isErrorCode(code) && ERRORS[code].status, Number(status), `${method.toUpperCase()} ${path} ${status}: ${code}`)
        }
      }
    }
  }
})

t.test('errorFromWire round-trips every code; an unknown code becomes INTERNAL_ERROR', async (t) => {
  for (const code of Object.keys(ERRORS)) {
    const original = new ApiError(code as keyof typeof ERRORS, `m ${code}`, { details: [1], param: 'p' })
    const wire = JSON.parse(JSON.stringify({ code: original.code, message: original.message, extra: original.extra }))
    const back = errorFromWire(wire.code, wire.message, wire.extra)
    t.ok(back instanceof ApiError)
    t.equal(back.code, code)
    t.equal(back.status, ERRORS[code as keyof typeof ERRORS].status)
    t.same(back.toJSON(), original.toJSON(), `${code} envelope survives`)
  }
  for (const bogus of ['NOPE', '', 'toString', 'constructor', '__proto__', 'hasOwnProperty', 'validation_error']) {
    const e = errorFromWire(bogus, 'from another thread')
    t.equal(e.code, 'INTERNAL_ERROR', `${JSON.stringify(bogus)} -> INTERNAL_ERROR`)
    t.equal(e.status, 500)
    t.equal(e.toJSON().code, 'INTERNAL_ERROR')
  }
  t.notOk(isErrorCode('toString'), 'inherited names are not codes')
  t.notOk(isErrorCode(42))
})

t.test('ApiError.toJSON is the SPEC.md section 7 envelope', async (t) => {
  t.same(new ApiError('KEY_NOT_FOUND').toJSON(), { error: true, code: 'KEY_NOT_FOUND', message: ERRORS.KEY_NOT_FOUND.message })
  t.same(new ApiError('UNSUPPORTED_OPTION', 'no', { param: 'duration' }).toJSON(), { error: true, code: 'UNSUPPORTED_OPTION', message: 'no', param: 'duration' })
  const e = new ApiError('VALIDATION_ERROR', undefined, { details: [{ path: '/a', message: 'bad' }] })
  t.equal(e.status, 400)
  t.same(e.toJSON().details, [{ path: '/a', message: 'bad' }])
})
