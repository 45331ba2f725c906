import { createHash } from 'node:crypto'
import { readdir, readFile } from 'node:fs/promises'
import { extname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { gzip } from 'node:zlib'
import { promisify } from 'node:util'
import { ApiError } from '../../errors.js'
import type { Reply, Route, RouteContext } from '../route.js'

const gzipAsync = promisify(gzip)

/** `vite build dashboard` writes here (dist/dashboard, beside dist/src). */
const ROOT = fileURLToPath(new URL('../../../dashboard/', import.meta.url))

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.woff2': 'font/woff2',
  '.map': 'application/json',
}

interface File { body: Buffer; type: string; etag: string; immutable: boolean; gz?: Promise<Buffer> }

/**
 * The API is the only thing the page talks to (same origin); media may come from
 * PUBLIC_BASE_URL or object storage, hence img/media from anywhere. uPlot sets inline styles.
 */
const CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src * data: blob:; media-src * blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

let files: Promise<Map<string, File>> | null = null

async function walk (dir: string, out: string[] = []): Promise<string[]> {
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name)
    if (e.isDirectory()) await walk(p, out)
    else out.push(p)
  }
  return out
}

/** Every built file, read once into memory (the bundle is a few hundred kB). */
function load (): Promise<Map<string, File>> {
  return (files ??= (async () => {
    const m = new Map<string, File>()
    let paths: string[] = []
    try { paths = await walk(ROOT) } catch { return m }
    for (const p of paths) {
      const rel = relative(ROOT, p).split('\\').join('/')
      const body = await readFile(p)
      m.set(rel, {
        body,
        type: TYPES[extname(p)] ?? 'application/octet-stream',
        etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 16)}"`,
        // Vite names everything under assets/ by content hash.
        immutable: rel.startsWith('assets/'),
      })
    }
    return m
  })())
}

async function serve (ctx: RouteContext, f: File): Promise<Reply> {
  const headers: Record<string, string> = {
    'Cache-Control': f.immutable ? 'public, max-age=31536000, immutable' : 'no-cache',
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    Vary: 'Accept-Encoding',
  }
  if (f.type.startsWith('text/html')) headers['Content-Security-Policy'] = CSP
  let raw = f.body
  let etag = f.etag
  if (f.body.length > 1024 && /\bgzip\b/.test(ctx.headers['accept-encoding'] ?? '') && /^(text\/|application\/json|image\/svg)/.test(f.type)) {
    raw = await (f.gz ??= gzipAsync(f.body, { level: 9 }))
    headers['Content-Encoding'] = 'gzip'
    etag = etag.replace(/"$/, '-gz"')
  }
  return { raw, contentType: f.type, etag, headers }
}

async function page (ctx: RouteContext): Promise<Reply> {
  const m = await load()
  const rest = ctx.path.replace(/^\/dashboard\/?/, '')
  const f = rest === '' ? undefined : m.get(rest)
  if (f) return serve(ctx, f)
  // A missing asset is a 404; any other path is a page of the single-page app.
  if (rest.startsWith('assets/')) throw new ApiError('NOT_FOUND', `No dashboard file ${rest.slice(0, 100)}`)
  const index = m.get('index.html')
  if (!index) throw new ApiError('SERVICE_UNAVAILABLE', 'The dashboard is not built: run npm run build')
  return serve(ctx, index)
}

/** The developer dashboard (docs/dashboard.md): the built single-page app, a client of /v1. */
export const routes: Route[] = [
  {
    method: 'GET',
    path: '/dashboard',
    auth: 'public',
    summary: 'Developer dashboard (HTML single-page app; uses the public API with a session JWT)',
    tag: 'System',
    errors: ['SERVICE_UNAVAILABLE'],
    responseContent: { 200: { 'text/html': { schema: { type: 'string' } } } },
    handler: page,
  },
  {
    method: 'GET',
    path: '/dashboard/*',
    auth: 'public',
    summary: 'Dashboard scripts and styles (content-hashed, cached for a year); any other path is the app\'s page',
    tag: 'System',
    errors: ['NOT_FOUND', 'SERVICE_UNAVAILABLE'],
    restShapes: ['assets/:file'],
    responseContent: { 200: { 'text/html': { schema: { type: 'string' } }, 'text/javascript': { schema: { type: 'string' } }, 'text/css': { schema: { type: 'string' } } } },
    handler: page,
  },
]
