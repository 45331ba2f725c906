import { Type } from '@sinclair/typebox'
import { ApiError } from '../../errors.js'
import { embedVideo } from '../../db/upstream.js'
import { EMBED_HEADERS, renderEmbedPage } from '../../media/embed.js'
import type { Route } from '../route.js'

/** Player sizes by the library's aspect ratio (the page's box before metadata loads). */
const RATIO: Record<string, [number, number]> = { '16:9': [16, 9], '9:16': [9, 16], '2:3': [2, 3], '3:2': [3, 2], '1:1': [1, 1], '4:3': [4, 3], '3:4': [3, 4], '21:9': [21, 9] }

/**
 * GET /embed/{video id} (DESIGN.md 7 "Library media"): the video's player page (src/media/embed.ts),
 * poster = its thumbnail. Public, as an embed must be; it shows only what the video's own URLs
 * already give to whoever holds them.
 */
export const routes: Route[] = [
  {
    method: 'GET',
    path: '/embed/:videoId',
    auth: 'public',
    summary: 'Embeddable player page of a library video (HTML)',
    tag: 'Library',
    errors: ['NOT_FOUND'],
    schema: { params: Type.Object({ videoId: Type.String() }) },
    responseContent: { 200: { 'text/html': { schema: { type: 'string', description: 'The player page' } } } },
    async handler (ctx) {
      const id = Number(ctx.params.videoId)
      if (!/^[1-9][0-9]{0,17}$/.test(ctx.params.videoId) || !Number.isSafeInteger(id)) throw new ApiError('NOT_FOUND', 'No such video')
      const v = await embedVideo(ctx.services.sql, id)
      if (!v) throw new ApiError('NOT_FOUND', 'No such video')
      const [w, h] = RATIO[v.aspect_ratio ?? ''] ?? [16, 9]
      const html = renderEmbedPage({ videoUrl: v.video_url, posterUrl: v.thumbnail_url, title: v.prompt ?? 'Video', width: w, height: h })
      const { 'content-type': contentType, ...headers } = EMBED_HEADERS
      return { raw: Buffer.from(html), contentType, headers }
    },
  },
]
