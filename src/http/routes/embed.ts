import { Type } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import { embedVideo } from '../../db/upstream.js'
import { EMBED_HEADERS, EMBED_TOKEN_RE, renderEmbedPage } from '../../media/embed.js'
import type { Route } from '../route.js'

/** Player sizes by the library's aspect ratio (the page's box before metadata loads). */
const RATIO: Record<string, [number, number]> = { '16:9': [16, 9], '9:16': [9, 16], '2:3': [2, 3], '3:2': [3, 2], '1:1': [1, 1], '4:3': [4, 3], '3:4': [3, 4], '21:9': [21, 9] }

/**
 * GET /embed/{token} (docs/providers.md "Routing", Results): the video's player page
 * (src/media/embed.ts), poster = its thumbnail. Public, as an embed must be: the token is
 * random (the video id, which can be counted, is never accepted) and the page shows only what
 * the video's own URLs already give to whoever holds them, never the prompt.
 */
export const routes: Route[] = [
  {
    method: 'GET',
    path: '/embed/:token',
    auth: 'public',
    summary: 'Embeddable player page of a library video (HTML); the token is the last segment of the video\'s embed_url',
    tag: 'Library',
    errors: ['NOT_FOUND'],
    schema: { params: Type.Object({ token: Type.String({ description: 'Random token of at least 128 bits, base64url (from embed_url)' }) }) },
    responseContent: { 200: { 'text/html': { schema: { type: 'string', description: 'The player page' } } } },
    async handler (ctx) {
      const token = ctx.params.token
      if (!EMBED_TOKEN_RE.test(token)) throw new ApiError('NOT_FOUND', 'No such video')
      const v = await embedVideo(ctx.services.sql, token)
      if (!v) throw new ApiError('NOT_FOUND', 'No such video')
      const [w, h] = RATIO[v.aspect_ratio ?? ''] ?? [16, 9]
      const html = renderEmbedPage({ videoUrl: v.video_url, posterUrl: v.thumbnail_url, width: w, height: h })
      const { 'content-type': contentType, ...headers } = EMBED_HEADERS
      return { raw: Buffer.from(html), contentType, headers }
    },
  },
]
