import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pino } from 'pino'
import { createApp, type App } from '../../src/app.js'
import { loadConfig, type Config } from '../../src/config.js'
import type { Route } from '../../src/http/route.js'
import { signSession } from '../../src/http/jwt.js'
import { freshDatabase } from './db.js'
import { loadContract, responseProblems } from './contract.js'

export const ADMIN_TOKEN = 'test-admin-token-0123456789abcdef'
export const JWT_SECRET = 'test-jwt-secret-0123456789abcdef0123456789'

type Tap = { teardown: (fn: () => Promise<void> | void) => void }

export interface TestServer {
  app: App
  url: string
  databaseUrl: string
  config: Config
  req: (method: string, path: string, opts?: ReqOpts) => Promise<Res>
}

export interface ReqOpts {
  body?: unknown
  /** Raw body (string/Buffer) instead of JSON. */
  raw?: string | Buffer
  headers?: Record<string, string>
  key?: string
  jwt?: string
  admin?: boolean
  /** Skip the OpenAPI response check (only for a test of the check itself). */
  unchecked?: boolean
}

export interface Res { status: number; headers: Headers; body: any; text: string }

/**
 * Starts the real service in-process on port 0 against its own fresh database. `env` is
 * the environment it reads (as for `npm start`).
 */
export async function startServer (
  t: Tap, env: Record<string, string> = {}, overrides: Partial<Config> = {}, extra: { routes?: Route[] } = {}
): Promise<TestServer> {
  // Several nodes of one deployment share a database: pass DATABASE_URL to reuse one.
  const databaseUrl = env.DATABASE_URL ?? await freshDatabase(t)
  const dataDir = await mkdtemp(join(tmpdir(), 'gjt-data-'))
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL: databaseUrl,
    ADMIN_TOKEN,
    JWT_SECRET,
    SHARDS: '2',
    LOG_LEVEL: 'silent',
    DATA_DIR: dataDir,
    // TEST_FRONTENDS=2 npm test: every test server runs that many front-end threads (a test's own FRONTENDS wins).
    ...(process.env.TEST_FRONTENDS ? { FRONTENDS: process.env.TEST_FRONTENDS } : {}),
    ...env,
  }, overrides)
  const app = await createApp(config, { logger: pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }), routes: extra.routes })
  t.teardown(async () => {
    await app.close()
    await rm(dataDir, { recursive: true, force: true })
  })
  const url = app.url
  const req = async (method: string, path: string, o: ReqOpts = {}): Promise<Res> => {
    const headers: Record<string, string> = { ...o.headers }
    if (o.key) headers['x-api-key'] = o.key
    if (o.jwt) headers.authorization = `Bearer ${o.jwt}`
    if (o.admin) headers.authorization = `Bearer ${ADMIN_TOKEN}`
    let body: string | Buffer | undefined
    if (o.raw !== undefined) body = o.raw
    else if (o.body !== undefined) { body = JSON.stringify(o.body); headers['content-type'] ??= 'application/json' }
    const r = await fetch(url + path, { method, headers, body: body as BodyInit | undefined })
    const text = await r.text()
    let parsed: unknown = text
    try { parsed = JSON.parse(text) } catch {}
    // The one contract hook: every JSON answer must match the served OpenAPI document.
    if (!o.unchecked) {
      const problem = responseProblems(await loadContract(url), method, path, r.status, r.headers.get('content-type'), parsed)
      if (problem !== null) throw new Error(`OpenAPI contract: ${problem}`)
    }
    return { status: r.status, headers: r.headers, body: parsed, text }
  }
  return { app, url, databaseUrl, config, req }
}

let userSeq = 0

export interface TestUser { id: number; email: string; password: string; jwt: string; key: string; keyId: number }

/** An account made through the operator API, logged in, with one API key. */
export async function createUser (s: TestServer, o: { credits?: number; verified?: boolean; withKey?: boolean } = {}): Promise<TestUser> {
  const email = `user${process.pid}_${++userSeq}_${Date.now()}@example.com`
  const password = 'correct horse battery'
  const r = await s.req('POST', '/v1/admin/accounts', { admin: true, body: { email, password, verified: o.verified ?? true, credits: o.credits ?? 200 } })
  if (r.status !== 201) throw new Error(`create account: ${r.status} ${r.text}`)
  const id = r.body.user_id as number
  const jwt = signSession(JWT_SECRET, id).token
  let key = ''
  let keyId = 0
  if (o.withKey !== false && (o.verified ?? true)) {
    const k = await s.req('POST', '/v1/auth/keys', { jwt, body: { name: 'test' } })
    if (k.status !== 201) throw new Error(`create key: ${k.status} ${k.text}`)
    key = k.body.key
    keyId = k.body.id
  }
  return { id, email, password, jwt, key, keyId }
}
