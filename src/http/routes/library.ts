import { Type, type Static } from '@sinclair/typebox'
import { listImages, listVideos, type ImageRow, type VideoRow } from '../../db/jobs.js'
import type { Route } from '../route.js'
import { ListOf, page, Paging } from './jobs.js'

const N = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()])
/** docs/api.md "Jobs" */
export const Video = Type.Object({
  id: Type.Integer(),
  prompt: N(Type.String()),
  model: N(Type.String()),
  model_id: N(Type.String()),
  aspect_ratio: N(Type.String()),
  video_url: Type.String(),
  embed_url: N(Type.String()),
  thumbnail_url: N(Type.String()),
  extended_from_video_id: Type.Union([Type.Integer(), Type.Null()]),
  created_at: Type.String({ format: 'date-time' }),
  completed_at: N(Type.String({ format: 'date-time' })),
})
/** docs/api.md "Jobs" */
export const Image = Type.Object({
  id: Type.Integer(),
  prompt: N(Type.String()),
  model: N(Type.String()),
  model_id: N(Type.String()),
  image_url: Type.String(),
  is_favorite: Type.Boolean(),
  created_at: Type.String({ format: 'date-time' }),
  completed_at: N(Type.String({ format: 'date-time' })),
})

const VideosQuery = Type.Object({ model: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })), ...Paging })
const ImagesQuery = Type.Object({ model: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })), favorite: Type.Optional(Type.Boolean()), ...Paging })

const iso = (d: Date | null) => d === null ? null : d.toISOString()
const videoOf = (r: VideoRow) => ({ ...r, created_at: r.created_at.toISOString(), completed_at: iso(r.completed_at) })
const imageOf = (r: ImageRow) => ({ ...r, created_at: r.created_at.toISOString(), completed_at: iso(r.completed_at) })

/** Library (docs/api.md "Jobs"): successfully generated media with durable URLs, newest first. */
export const routes: Route[] = [
  {
    method: 'GET',
    path: '/v1/videos',
    auth: 'key',
    scope: 'read',
    summary: 'The caller\'s generated videos (durable video_url), newest first; `model` filters on model_id',
    tag: 'Library',
    schema: { query: VideosQuery, response: { 200: ListOf(Video) } },
    async handler (ctx) {
      const q = Object.fromEntries(ctx.query) as unknown as Static<typeof VideosQuery>
      const limit = Number(q.limit ?? 20)
      const offset = Number(q.offset ?? 0)
      const { rows, total } = await listVideos(ctx.services.sql, ctx.caller!.accountId, { model: q.model, limit, offset })
      return { body: page(rows.map(videoOf), total, limit, offset) }
    },
  },
  {
    method: 'GET',
    path: '/v1/images',
    auth: 'key',
    scope: 'read',
    summary: 'The caller\'s generated images, newest first; `favorite=true` for favourites',
    tag: 'Library',
    schema: { query: ImagesQuery, response: { 200: ListOf(Image) } },
    async handler (ctx) {
      const q = Object.fromEntries(ctx.query) as unknown as Record<string, string>
      const limit = Number(q.limit ?? 20)
      const offset = Number(q.offset ?? 0)
      const { rows, total } = await listImages(ctx.services.sql, ctx.caller!.accountId, { model: q.model, favorite: q.favorite === 'true', limit, offset })
      return { body: page(rows.map(imageOf), total, limit, offset) }
    },
  },
]
