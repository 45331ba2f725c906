import { readFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

/**
 * Operator CLI (`npm run admin -- <command>`, docs/operations.md "Operator CLI"): a thin client of the running
 * service's operator API, so it goes through the same validation, actors and ledger as HTTP.
 * Base URL from GENJOBS_URL (default http://127.0.0.1:$PORT, PORT default 8080); token from
 * ADMIN_TOKEN or DATA_DIR/admin-token (DATA_DIR default ./data). Prints the JSON answer.
 * Exit codes: 0 success, 1 the service refused (its error message is printed) or could not be
 * reached, 2 bad command line.
 */

const HELP = `Usage: npm run admin -- <command> [options]

Commands:
  create-account --email E --password P [--verified] [--credits N]
                          create an account (credits default 200, as a grant)
  purchase ID --credits N [--currency USD] [--amount 5]
                          record a purchase: adds credits, keys become pro on next use
  grant ID --credits N [--note TEXT]
                          grant credits (no tier change)
  set ID [--banned true|false] [--verified true|false]
         [--credits-locked true|false] [--enterprise true|false]
                          set account flags
  asset ID --kind character|voice --name NAME
                          create a character or voice asset
  show ID                 account with balance, flags and ledger totals
  routes check [--file F] [--online] [--json]
                          what each route of the routing file (--file, default
                          PROVIDERS_FILE) serves: model x option value x route;
                          --online also compares the shipped upstream schemas
                          with the providers' live ones (runs locally, no service)
  help                    this text

Environment:
  GENJOBS_URL   service base URL (default http://127.0.0.1:$PORT, PORT default 8080)
  ADMIN_TOKEN   operator token (default: the contents of $DATA_DIR/admin-token)
  DATA_DIR      data directory of the service (default ./data)
  routes check: PROVIDERS_FILE; with --online FAL_OPENAPI_URL (default
  https://fal.ai/api/openapi/queue/openapi.json), REPLICATE_API_URL, REPLICATE_API_TOKEN

Exit status: 0 ok, 1 refused by the service or unreachable (routes check: a
routing file that fails its check, or --online found drift or could not fetch
a schema), 2 bad command line.
`

class UsageError extends Error {}

type Values = Record<string, string | boolean | undefined>

function int (name: string, v: string | boolean | undefined, opts: { required?: boolean; min?: number } = {}): number | undefined {
  if (v === undefined) {
    if (opts.required) throw new UsageError(`--${name} is required`)
    return undefined
  }
  if (typeof v !== 'string' || !/^-?\d+$/.test(v) || !Number.isSafeInteger(Number(v))) throw new UsageError(`--${name} must be an integer, got ${JSON.stringify(v)}`)
  const n = Number(v)
  if (opts.min !== undefined && n < opts.min) throw new UsageError(`--${name} must be at least ${opts.min}`)
  return n
}

function num (name: string, v: string | boolean | undefined): number | undefined {
  if (v === undefined) return undefined
  const n = typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN
  if (!Number.isFinite(n)) throw new UsageError(`--${name} must be a number, got ${JSON.stringify(v)}`)
  return n
}

function bool (name: string, v: string | boolean | undefined): boolean | undefined {
  if (v === undefined) return undefined
  if (v === 'true') return true
  if (v === 'false') return false
  throw new UsageError(`--${name} must be true or false, got ${JSON.stringify(v)}`)
}

function str (name: string, v: string | boolean | undefined, required = false): string | undefined {
  if (v === undefined) {
    if (required) throw new UsageError(`--${name} is required`)
    return undefined
  }
  return String(v)
}

function accountId (positionals: string[]): string {
  const id = positionals[0]
  if (id === undefined) throw new UsageError('an account ID is required')
  if (!/^[1-9]\d{0,15}$/.test(id)) throw new UsageError(`account ID must be a positive integer, got ${JSON.stringify(id)}`)
  if (positionals.length > 1) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[1])}`)
  return id
}

function parse (args: string[], options: Record<string, { type: 'string' | 'boolean' }>): { values: Values; positionals: string[] } {
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true }) as { values: Values; positionals: string[] }
  } catch (e) {
    throw new UsageError((e as Error).message)
  }
}

interface Call { method: string; path: string; body?: Record<string, unknown> }

/** Turns a command line into one operator API call (null: print help). */
export function plan (argv: string[]): Call | null {
  const [command, ...rest] = argv
  switch (command) {
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      return null
    case 'create-account': {
      const { values: v, positionals } = parse(rest, { email: { type: 'string' }, password: { type: 'string' }, verified: { type: 'boolean' }, credits: { type: 'string' } })
      if (positionals.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`)
      const body: Record<string, unknown> = { email: str('email', v.email, true), password: str('password', v.password, true) }
      if (v.verified) body.verified = true
      const credits = int('credits', v.credits, { min: 0 })
      if (credits !== undefined) body.credits = credits
      return { method: 'POST', path: '/v1/admin/accounts', body }
    }
    case 'purchase': {
      const { values: v, positionals } = parse(rest, { credits: { type: 'string' }, currency: { type: 'string' }, amount: { type: 'string' } })
      const id = accountId(positionals)
      const body: Record<string, unknown> = { credits: int('credits', v.credits, { required: true, min: 1 }) }
      if (v.currency !== undefined) body.currency = str('currency', v.currency)!.toUpperCase()
      const amount = num('amount', v.amount)
      if (amount !== undefined) body.amount = amount
      return { method: 'POST', path: `/v1/admin/accounts/${id}/purchases`, body }
    }
    case 'grant': {
      const { values: v, positionals } = parse(rest, { credits: { type: 'string' }, note: { type: 'string' } })
      const id = accountId(positionals)
      const body: Record<string, unknown> = { credits: int('credits', v.credits, { required: true, min: 1 }) }
      if (v.note !== undefined) body.note = str('note', v.note)
      return { method: 'POST', path: `/v1/admin/accounts/${id}/grants`, body }
    }
    case 'set': {
      const { values: v, positionals } = parse(rest, { banned: { type: 'string' }, verified: { type: 'string' }, 'credits-locked': { type: 'string' }, enterprise: { type: 'string' } })
      const id = accountId(positionals)
      const body: Record<string, unknown> = {}
      const flags: Array<[string, string]> = [['banned', 'banned'], ['verified', 'email_verified'], ['credits-locked', 'credits_locked'], ['enterprise', 'enterprise']]
      for (const [opt, field] of flags) {
        const b = bool(opt, v[opt])
        if (b !== undefined) body[field] = b
      }
      if (Object.keys(body).length === 0) throw new UsageError('set needs at least one of --banned, --verified, --credits-locked, --enterprise')
      return { method: 'PATCH', path: `/v1/admin/accounts/${id}`, body }
    }
    case 'asset': {
      const { values: v, positionals } = parse(rest, { kind: { type: 'string' }, name: { type: 'string' } })
      const id = accountId(positionals)
      const kind = str('kind', v.kind, true)
      if (kind !== 'character' && kind !== 'voice') throw new UsageError(`--kind must be character or voice, got ${JSON.stringify(kind)}`)
      return { method: 'POST', path: `/v1/admin/accounts/${id}/assets`, body: { kind, name: str('name', v.name, true) } }
    }
    case 'show': {
      const { positionals } = parse(rest, {})
      return { method: 'GET', path: `/v1/admin/accounts/${accountId(positionals)}` }
    }
    default:
      throw new UsageError(`unknown command ${JSON.stringify(command)}`)
  }
}

async function adminToken (env: NodeJS.ProcessEnv): Promise<string> {
  if (env.ADMIN_TOKEN) return env.ADMIN_TOKEN
  const file = join(resolve(env.DATA_DIR || './data'), 'admin-token')
  try {
    const token = (await readFile(file, 'utf8')).trim()
    if (token) return token
  } catch {}
  throw new Error(`no operator token: set ADMIN_TOKEN, or run this where the service keeps ${file}`)
}

/** `routes check`: local, no service involved (docs/providers.md "routes check"). */
async function routesCheck (args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const { values: v, positionals } = parse(args, { file: { type: 'string' }, online: { type: 'boolean' }, json: { type: 'boolean' } })
  if (positionals[0] !== 'check') throw new UsageError(positionals.length ? `unknown routes command ${JSON.stringify(positionals[0])} (expected check)` : 'routes needs a command: routes check')
  if (positionals.length > 1) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[1])}`)
  const file = str('file', v.file) ?? env.PROVIDERS_FILE
  if (!file) throw new UsageError('routes check needs --file or PROVIDERS_FILE')
  const { loadRouting, CREDENTIAL_OF } = await import('../providers/routing.js')
  const check = await import('../providers/routes-check.js')
  // Credentials are not needed to read the routes: placeholders let the file be checked anywhere.
  const creds: Record<string, string> = {}
  for (const name of Object.values(CREDENTIAL_OF)) creds[name] = env[name] || 'not-needed-for-routes-check'
  let table
  try { table = loadRouting(file, { ...env, ...creds }) } catch (e) {
    process.stderr.write(`error: ${(e as Error).message}\n`)
    return 1
  }
  if (!table) throw new UsageError('routes check needs --file or PROVIDERS_FILE')
  const rows = check.routeMatrix(table)
  const drift = v.online ? await check.checkOnline(table, check.onlineSettings(env)) : null
  if (v.json) process.stdout.write(`${JSON.stringify({ file, matrix: rows, ...(drift ? { drift } : {}) }, null, 2)}\n`)
  else {
    process.stdout.write(check.formatMatrix(table, rows))
    if (drift) process.stdout.write(check.formatDrift(drift))
  }
  return drift && drift.some(r => r.status === 'drift' || r.status === 'error') ? 1 : 0
}

export async function main (argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  if (argv[0] === 'routes') {
    try { return await routesCheck(argv.slice(1), env) } catch (e) {
      if (!(e instanceof UsageError)) throw e
      process.stderr.write(`error: ${e.message}\n\n${HELP}`)
      return 2
    }
  }
  let call: Call | null
  try {
    call = plan(argv)
  } catch (e) {
    if (!(e instanceof UsageError)) throw e
    process.stderr.write(`error: ${e.message}\n\n${HELP}`)
    return 2
  }
  if (call === null) { process.stdout.write(HELP); return 0 }

  const base = (env.GENJOBS_URL || `http://127.0.0.1:${env.PORT || 8080}`).replace(/\/+$/, '').replace(/\/v1$/, '')
  let token: string
  try { token = await adminToken(env) } catch (e) {
    process.stderr.write(`error: ${(e as Error).message}\n`)
    return 1
  }
  let res: Response
  try {
    res = await fetch(base + call.path, {
      method: call.method,
      headers: { authorization: `Bearer ${token}`, accept: 'application/json', ...(call.body ? { 'content-type': 'application/json' } : {}) },
      body: call.body ? JSON.stringify(call.body) : undefined,
      signal: AbortSignal.timeout(30_000),
    })
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause
    process.stderr.write(`error: cannot reach the service at ${base}: ${cause?.code ?? cause?.message ?? (e as Error).message}\n`)
    return 1
  }
  const text = await res.text()
  let body: unknown
  try { body = JSON.parse(text) } catch { body = undefined }
  if (!res.ok) {
    const env = body as { code?: string; message?: string; details?: unknown } | undefined
    if (env && typeof env.message === 'string') {
      process.stderr.write(`error: ${env.message}${env.code ? ` (${env.code}, HTTP ${res.status})` : ''}\n`)
      if (env.details !== undefined) process.stderr.write(`${JSON.stringify(env.details, null, 2)}\n`)
    } else {
      process.stderr.write(`error: HTTP ${res.status} from ${base}${call.path}: ${text.slice(0, 500)}\n`)
    }
    return 1
  }
  process.stdout.write(`${body === undefined ? text : JSON.stringify(body, null, 2)}\n`)
  return 0
}

// Run when executed directly (node dist/src/cli/admin.js), not when imported by tests.
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => { process.exitCode = code },
    (err) => { process.stderr.write(`error: ${(err as Error).stack ?? err}\n`); process.exitCode = 1 },
  )
}
