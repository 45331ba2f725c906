import { randomBytes } from 'node:crypto'

/**
 * The embed page of a library video (docs/providers.md "Routing", Results: `embed_url` =
 * `{PUBLIC_BASE_URL}/embed/{token}`): a self-contained HTML player, poster = the thumbnail.
 * No script, no external stylesheet, font or image; every interpolated value is HTML-escaped
 * and URLs other than http(s) are dropped. Serve it with `EMBED_HEADERS`. The page is public,
 * so it shows the media and nothing of the owner's: no prompt, not even in its title.
 */

/**
 * The random part of an embed URL: 24 bytes (192 bits, base64url), so pages of other users
 * cannot be found by counting or guessing (the sequential video id could).
 */
export function newEmbedToken (): string {
  return randomBytes(24).toString('base64url')
}

/** A string that may be an embed token (anything else is a 404 without a database read). */
export const EMBED_TOKEN_RE = /^[A-Za-z0-9_-]{22,64}$/

export interface EmbedPage {
  /** The video file (our copy under PUBLIC_BASE_URL). */
  videoUrl: string
  /** The thumbnail shown before playback; null for none. */
  posterUrl: string | null
  /** Intrinsic size, for the aspect ratio before metadata loads. */
  width?: number | null
  height?: number | null
}

/**
 * Headers for the page: a CSP that allows no script and only media/images (any origin, since
 * results may live on S3), inline style, and framing by anyone (it is meant to be embedded).
 */
export const EMBED_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/html; charset=utf-8',
  'content-security-policy': "default-src 'none'; media-src https: http: blob:; img-src https: http: data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'public, max-age=300',
})

/** Escapes text for an HTML text node or a double- or single-quoted attribute. */
export function escapeHtml (s: string): string {
  return s.replace(/[&<>"'`]/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' }[c] as string))
}

/** The URL when it is absolute http(s), else null (no javascript:, data:, relative tricks). */
function httpUrl (u: string | null | undefined): string | null {
  if (typeof u !== 'string') return null
  try {
    const url = new URL(u)
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.toString() : null
  } catch { return null }
}

export function renderEmbedPage (p: EmbedPage): string {
  const video = httpUrl(p.videoUrl)
  if (!video) throw new TypeError('renderEmbedPage: videoUrl must be an absolute http(s) URL')
  const poster = httpUrl(p.posterUrl)
  const title = 'Video'
  const w = Number.isInteger(p.width) && (p.width as number) > 0 ? (p.width as number) : 16
  const h = Number.isInteger(p.height) && (p.height as number) > 0 ? (p.height as number) : 9
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<link rel="icon" href="data:,">
<title>${title}</title>
<style>
html,body{margin:0;height:100%;background:#000}
body{display:flex;align-items:center;justify-content:center}
video{display:block;width:100%;height:100%;max-height:100vh;aspect-ratio:${w}/${h};object-fit:contain;background:#000}
</style>
</head>
<body>
<video controls playsinline preload="metadata"${poster ? ` poster="${escapeHtml(poster)}"` : ''} src="${escapeHtml(video)}" aria-label="${title}">
<a href="${escapeHtml(video)}">Download the video</a>
</video>
</body>
</html>
`
}
