// Library, docs/api.md "Jobs" (list envelope: docs/api.md "Endpoints").
import t from 'tap'
import { assertError } from '../helpers/assert.js'
import { startServer, type TestUser } from '../helpers/server.js'
import { dbOf, FAST_ENV, fetchResult, image, paidUser, pollJob, video } from '../helpers/jobs.js'

const s = await startServer(t, FAST_ENV)
const sql = dbOf(t, s)
const ISO = (v: unknown) => typeof v === 'string' && new Date(v).toISOString() === v

async function make (u: TestUser, kind: 'video' | 'image', body: Record<string, unknown>): Promise<any> {
  const r = await s.req('POST', `/v1/generate/${kind}`, { key: u.key, body })
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
  return (await pollJob(s, u, r.body.id)).job
}

const u = await paidUser(s, 10_000)
const other = await paidUser(s, 1000)
// Sequential, so creation order is the expected newest-first order reversed.
const v1 = await make(u, 'video', video('first video'))
const v2 = await make(u, 'video', { model: 'seedance-2-mini', prompt: 'second video', resolution: '480p', duration: '6', aspect_ratio: '9:16' })
const vFailed = await make(u, 'video', video('broken [sim:fail]'))
const v3 = await make(u, 'video', video('third video', { aspect_ratio: '9:16' }))
const i1 = await make(u, 'image', image('first image'))
const i2 = await make(u, 'image', { model: 'gpt-image-2', prompt: 'second image', resolution: '1K' })
const i3 = await make(u, 'image', image('third image', { output_format: 'jpeg' }))
await make(other, 'video', video('not yours'))
await make(other, 'image', image('not yours'))

t.test('GET /v1/videos: completed videos only, newest first, in the list envelope, with durable playable URLs', async (t) => {
  t.equal(vFailed.status, 'failed')
  const r = await s.req('GET', '/v1/videos', { key: u.key })
  t.equal(r.status, 200)
  t.same(Object.keys(r.body).sort(), ['data', 'has_more', 'limit', 'offset', 'total'])
  t.equal(r.body.total, 3, 'the failed job and the other account\'s video are not listed')
  t.equal(r.body.limit, 20)
  t.equal(r.body.offset, 0)
  t.equal(r.body.has_more, false)
  t.same(r.body.data.map((x: any) => x.prompt), ['third video', 'second video', 'first video'], 'newest first')
  const [a, b, c] = r.body.data
  t.same(Object.keys(a).sort(), ['aspect_ratio', 'completed_at', 'created_at', 'embed_url', 'extended_from_video_id', 'id', 'model', 'model_id', 'prompt', 'thumbnail_url', 'video_url'].sort())
  t.type(a.id, 'number')
  t.ok(Number.isInteger(a.id))
  t.equal(a.model_id, 'veo3-fast')
  t.type(a.model, 'string', 'the stored provider model string')
  t.equal(b.model_id, 'seedance-2-mini')
  t.equal(a.aspect_ratio, '9:16')
  t.equal(b.aspect_ratio, '9:16')
  t.equal(c.aspect_ratio, '16:9')
  t.equal(a.extended_from_video_id, null)
  t.ok(ISO(a.created_at) && ISO(a.completed_at))
  t.same([a.video_url, b.video_url, c.video_url], [v3.result_url, v2.result_url, v1.result_url], 'the jobs\' stored results')
  for (const x of r.body.data) {
    const f = await fetchResult(s, x.video_url)
    t.equal(f.status, 200, `${x.prompt}: video_url serves`)
    t.equal(f.headers.get('content-type'), 'video/mp4')
    t.equal(Buffer.from(await f.arrayBuffer()).toString('latin1', 4, 8), 'ftyp')
  }
})

t.test('GET /v1/videos?model= filters on the API model id; limit and offset page', async (t) => {
  const veo = await s.req('GET', '/v1/videos?model=veo3-fast', { key: u.key })
  t.same(veo.body.data.map((x: any) => x.prompt), ['third video', 'first video'])
  t.equal(veo.body.total, 2)
  const none = await s.req('GET', '/v1/videos?model=kling-3.0', { key: u.key })
  t.same(none.body.data, [])
  t.equal(none.body.total, 0)
  const stored = (await s.req('GET', '/v1/videos?limit=1', { key: u.key })).body.data[0].model
  if (stored !== 'veo3-fast') {
    const byStored = await s.req('GET', `/v1/videos?model=${encodeURIComponent(stored)}`, { key: u.key })
    t.equal(byStored.body.total, 0, 'the provider model string is not what the filter matches')
  }
  const p1 = await s.req('GET', '/v1/videos?limit=2', { key: u.key })
  t.same(p1.body.data.map((x: any) => x.prompt), ['third video', 'second video'])
  t.equal(p1.body.has_more, true)
  const p2 = await s.req('GET', '/v1/videos?limit=2&offset=2', { key: u.key })
  t.same(p2.body.data.map((x: any) => x.prompt), ['first video'])
  t.equal(p2.body.has_more, false)
  t.equal(p2.body.limit, 2)
  t.equal(p2.body.offset, 2)
})

t.test('GET /v1/images: completed images newest first with durable URLs, model filter, favorite=true', async (t) => {
  const r = await s.req('GET', '/v1/images', { key: u.key })
  t.equal(r.status, 200)
  t.equal(r.body.total, 3)
  t.same(r.body.data.map((x: any) => x.prompt), ['third image', 'second image', 'first image'])
  const [a] = r.body.data
  t.same(Object.keys(a).sort(), ['completed_at', 'created_at', 'id', 'image_url', 'is_favorite', 'model', 'model_id', 'prompt'])
  t.equal(a.is_favorite, false)
  t.equal(a.model_id, 'nano-banana')
  t.same(r.body.data.map((x: any) => x.image_url), [i3.result_url, i2.result_url, i1.result_url])
  const jpg = await fetchResult(s, a.image_url)
  t.equal(jpg.status, 200)
  t.equal(jpg.headers.get('content-type'), 'image/jpeg')
  const png = await fetchResult(s, r.body.data[1].image_url)
  t.equal(png.headers.get('content-type'), 'image/png')
  t.same([...Buffer.from(await png.arrayBuffer()).subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47], 'PNG signature')

  const byModel = await s.req('GET', '/v1/images?model=gpt-image-2', { key: u.key })
  t.same(byModel.body.data.map((x: any) => x.prompt), ['second image'])

  // Favourites are set in the web app; mark one directly.
  await sql`UPDATE images SET is_favorite = true WHERE job_id = ${i1.id}`
  const fav = await s.req('GET', '/v1/images?favorite=true', { key: u.key })
  t.same(fav.body.data.map((x: any) => x.prompt), ['first image'])
  t.equal(fav.body.total, 1)
  t.equal(fav.body.data[0].is_favorite, true)
  const favModel = await s.req('GET', '/v1/images?favorite=true&model=nano-banana', { key: u.key })
  t.equal(favModel.body.total, 1)
  const favOther = await s.req('GET', '/v1/images?favorite=true&model=gpt-image-2', { key: u.key })
  t.equal(favOther.body.total, 0)
})

t.test('limit over 100 (or below 1, or a negative offset) is 400 VALIDATION_ERROR; 100 is accepted', async (t) => {
  for (const path of ['/v1/videos', '/v1/images']) {
    assertError(t, await s.req('GET', `${path}?limit=101`, { key: u.key }), 400, 'VALIDATION_ERROR', `${path} limit 101`)
    assertError(t, await s.req('GET', `${path}?limit=0`, { key: u.key }), 400, 'VALIDATION_ERROR', `${path} limit 0`)
    assertError(t, await s.req('GET', `${path}?offset=-1`, { key: u.key }), 400, 'VALIDATION_ERROR', `${path} offset -1`)
    const ok = await s.req('GET', `${path}?limit=100`, { key: u.key })
    t.equal(ok.status, 200)
    t.equal(ok.body.limit, 100)
  }
  assertError(t, await s.req('GET', '/v1/images?favorite=maybe', { key: u.key }), 400, 'VALIDATION_ERROR', 'favorite must be a boolean')
})

t.test('the library needs authentication and shows only the caller\'s items', async (t) => {
  assertError(t, await s.req('GET', '/v1/videos'), 401, 'AUTH_REQUIRED')
  assertError(t, await s.req('GET', '/v1/images'), 401, 'AUTH_REQUIRED')
  const theirs = await s.req('GET', '/v1/videos', { key: other.key })
  t.same(theirs.body.data.map((x: any) => x.prompt), ['not yours'])
  const theirImages = await s.req('GET', '/v1/images', { key: other.key })
  t.same(theirImages.body.data.map((x: any) => x.prompt), ['not yours'])
})
