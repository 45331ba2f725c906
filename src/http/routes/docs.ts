import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { gzip } from 'node:zlib'
import { promisify } from 'node:util'
import { Type } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import type { Reply, Route, RouteContext } from '../route.js'

/**
 * GET /v1/docs (docs/api.md "API reference (/v1/docs)"): an interactive reference (Swagger UI from the `swagger-ui-dist`
 * package: one self-contained browser bundle, no dependencies) rendered in the browser from
 * /v1/openapi.json. Everything is served by the service itself: the machine may have no
 * internet, so no CDN. The bundle files are read once when this module loads.
 */

const gzipAsync = promisify(gzip)
const UI_DIR = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'))
const PREFIX = '/v1/docs/assets/'

interface Asset {
  name: string
  contentType: string
  body: Buffer
  etag: string
  /** Versioned URL the page links to: `?v=` changes with the content, so it can be cached for a year. */
  url: string
  gz?: Promise<Buffer>
}

function asset (name: string, contentType: string, body: Buffer): Asset {
  const hash = createHash('sha256').update(body).digest('base64url').slice(0, 16)
  return { name, contentType, body, etag: `"${hash}"`, url: `${PREFIX}${name}?v=${hash}` }
}

// The page's own script is a file, not inline, so the Content-Security-Policy can forbid inline scripts.
const INIT_JS = `window.ui = SwaggerUIBundle({
  url: '/v1/openapi.json',
  dom_id: '#reference',
  deepLinking: true,
  docExpansion: 'list',
  defaultModelsExpandDepth: 0,
  displayRequestDuration: true,
  filter: true,
  tryItOutEnabled: false,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  layout: 'BaseLayout'
})
`
const PAGE_CSS = `body { margin: 0; background: #fafafa; }
.reference-header { font: 600 14px/1.4 system-ui, sans-serif; padding: 10px 20px; background: #1b1b1b; color: #eee; }
.reference-header a { color: #9cf; }
`

const bundle = asset('swagger-ui-bundle.js', 'text/javascript; charset=utf-8', readFileSync(join(UI_DIR, 'swagger-ui-bundle.js')))
const css = asset('swagger-ui.css', 'text/css; charset=utf-8', readFileSync(join(UI_DIR, 'swagger-ui.css')))
const init = asset('init.js', 'text/javascript; charset=utf-8', Buffer.from(INIT_JS))
const pageCss = asset('page.css', 'text/css; charset=utf-8', Buffer.from(PAGE_CSS))
const ASSETS = [bundle, css, init, pageCss]
const BY_NAME = new Map(ASSETS.map(a => [a.name, a]))

const HTML = Buffer.from(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Generation Job Service API reference</title>
<link rel="stylesheet" href="${css.url}">
<link rel="stylesheet" href="${pageCss.url}">
</head>
<body>
<div class="reference-header">Generation Job Service API v1 &middot; machine-readable: <a href="/v1/openapi.json">/v1/openapi.json</a></div>
<div id="reference"></div>
<script src="${bundle.url}"></script>
<script src="${init.url}"></script>
</body>
</html>
`)
const HTML_ETAG = `"${createHash('sha256').update(HTML).digest('base64url').slice(0, 16)}"`

/** Scripts only from this origin; Swagger UI sets inline styles; "try it out" may call the configured server URL. */
const CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src *; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

function acceptsGzip (ctx: RouteContext): boolean {
  return /\bgzip\b/.test(ctx.headers['accept-encoding'] ?? '')
}

async function serveAsset (ctx: RouteContext, a: Asset): Promise<Reply> {
  const headers: Record<string, string> = {
    'Cache-Control': 'public, max-age=31536000, immutable',
    'X-Content-Type-Options': 'nosniff',
    Vary: 'Accept-Encoding',
  }
  let raw = a.body
  // Large text compresses 3-4x; done once, on first use, off the event loop.
  if (a.body.length > 4096 && acceptsGzip(ctx)) {
    raw = await (a.gz ??= gzipAsync(a.body, { level: 9 }))
    headers['Content-Encoding'] = 'gzip'
  }
  return { raw, contentType: a.contentType, etag: headers['Content-Encoding'] ? a.etag.replace(/"$/, '-gz"') : a.etag, headers }
}


export const routes: Route[] = [
  {
    method: 'GET',
    path: '/v1/docs',
    auth: 'public',
    summary: 'Interactive API reference (HTML page rendered from /v1/openapi.json; served without any CDN)',
    tag: 'System',
    responseContent: { 200: { 'text/html': { schema: { type: 'string' } } } },
    handler () {
      return {
        raw: HTML,
        contentType: 'text/html; charset=utf-8',
        etag: HTML_ETAG,
        headers: { 'Cache-Control': 'no-cache', 'Content-Security-Policy': CSP, 'X-Content-Type-Options': 'nosniff', 'Referrer-Policy': 'no-referrer' },
      }
    },
  },
  {
    method: 'GET',
    path: '/v1/docs/assets/:file',
    auth: 'public',
    summary: 'Static files of the /v1/docs page (script, styles); cached for a year under their versioned URLs',
    tag: 'System',
    errors: ['NOT_FOUND'],
    schema: { params: Type.Object({ file: Type.Union(ASSETS.map(a => Type.Literal(a.name))) }) },
    responseContent: { 200: { 'text/javascript': { schema: { type: 'string' } }, 'text/css': { schema: { type: 'string' } } } },
    handler (ctx) {
      const a = BY_NAME.get(ctx.params.file)
      if (!a) throw new ApiError('NOT_FOUND', `No docs asset ${ctx.params.file.slice(0, 64)}`)
      return serveAsset(ctx, a)
    },
  },
]
