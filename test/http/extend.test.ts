// POST /v1/extend/video, docs/api.md "Jobs" (extended_from_video_id).
import t from 'tap'
import { assertError } from '../helpers/assert.js'
import { createUser, startServer, type TestUser } from '../helpers/server.js'
import { balance, FAST_ENV, fetchResult, image, paidUser, pollJob, video } from '../helpers/jobs.js'

const s = await startServer(t, FAST_ENV)
const extend = (u: TestUser, body: unknown) => s.req('POST', '/v1/extend/video', { key: u.key, body })

async function completedVideo (u: TestUser, body: Record<string, unknown> = video()): Promise<string> {
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body })
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`)
  const { job } = await pollJob(s, u, r.body.id)
  if (job.status !== 'completed') throw new Error(`job ${job.status}`)
  return r.body.id
}

async function videoOfJob (u: TestUser, n = 100) {
  const r = await s.req('GET', `/v1/videos?limit=${n}`, { key: u.key })
  return r.body.data as any[]
}

t.test('extending a completed veo3-fast job: 201, 120 credits, completes, and the library links the new video to its source', async (t) => {
  const u = await paidUser(s, 1000)
  const src = await completedVideo(u)
  const [srcVideo] = await videoOfJob(u)
  t.equal(srcVideo.extended_from_video_id, null, 'a generated video extends nothing')

  const r = await extend(u, { job_id: src, prompt: 'the cat rides the wave to shore' })
  t.equal(r.status, 201, r.text)
  t.match(r.body.id, /^job_/)
  t.not(r.body.id, src)
  t.equal(r.body.credits_charged, 120)
  t.equal(r.body.remaining_credits, 1000 - 120 - 120)
  t.equal(r.body.model, 'veo3-fast', 'the source\'s model')
  t.equal(r.body.estimated_seconds, 110)

  const { job } = await pollJob(s, u, r.body.id)
  t.equal(job.status, 'completed')
  t.equal(job.type, 'extend')
  t.equal(job.prompt, 'the cat rides the wave to shore')
  const f = await fetchResult(s, job.result_url)
  t.equal(f.status, 200)
  t.equal(f.headers.get('content-type'), 'video/mp4')

  const vids = await videoOfJob(u)
  t.equal(vids.length, 2)
  t.equal(vids[0].extended_from_video_id, srcVideo.id, 'newest first: the extension, pointing at the source video')
  t.equal(vids[0].model_id, 'veo3-fast')
  t.equal(vids[0].prompt, 'the cat rides the wave to shore')
  t.equal(vids[0].video_url, job.result_url)

  // An extension is itself a completed veo3 video: it can be extended again.
  const again = await extend(u, { job_id: r.body.id, prompt: 'and walks up the beach' })
  t.equal(again.status, 201, again.text)
  await pollJob(s, u, again.body.id)
  const chain = await videoOfJob(u)
  t.equal(chain[0].extended_from_video_id, vids[0].id, 'the chain links to the previous extension')
  t.equal(await balance(s, u), 1000 - 4 * 120 + 120, 'three veo3 charges in total (source + 2 extensions)')
})

t.test('veo3-quality is extendable for the same flat 120 credits', async (t) => {
  const u = await paidUser(s, 1000)
  const src = await completedVideo(u, { model: 'veo3-quality', prompt: 'a quiet forest' })
  const r = await extend(u, { job_id: src, prompt: 'rain starts' })
  t.equal(r.status, 201, r.text)
  t.equal(r.body.model, 'veo3-quality')
  t.equal(r.body.credits_charged, 120)
})

t.test('an unknown, malformed or another account\'s job is 404 JOB_NOT_FOUND, nothing charged', async (t) => {
  const u = await paidUser(s, 1000)
  const other = await paidUser(s, 1000)
  const theirs = await completedVideo(other)
  assertError(t, await extend(u, { job_id: theirs, prompt: 'p' }), 404, 'JOB_NOT_FOUND', 'another account\'s completed veo3 job')
  assertError(t, await extend(u, { job_id: 'job_AAAAAAAAAAAAAAAA', prompt: 'p' }), 404, 'JOB_NOT_FOUND', 'unknown id')
  assertError(t, await extend(u, { job_id: 'video-123', prompt: 'p' }), 404, 'JOB_NOT_FOUND', 'malformed id')
  t.equal(await balance(s, u), 1000)
})

t.test('a source that is not a completed veo3 video is 422 UNSUPPORTED_OPTION (param job_id), nothing charged', async (t) => {
  const u = await paidUser(s, 5000)
  const seedance = await completedVideo(u, { model: 'seedance-2-mini', prompt: 'x', resolution: '480p', duration: '6' })
  const img = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  await pollJob(s, u, img.body.id)
  const failed = await s.req('POST', '/v1/generate/video', { key: u.key, body: video('[sim:fail]') })
  await pollJob(s, u, failed.body.id)
  const queued = await s.req('POST', '/v1/generate/video', { key: u.key, body: video('[sim:queue]') })
  const before = await balance(s, u)

  for (const [name, id] of [['seedance video', seedance], ['image', img.body.id], ['failed veo3', failed.body.id], ['queued veo3', queued.body.id]]) {
    const r = await extend(u, { job_id: id, prompt: 'more' })
    assertError(t, r, 422, 'UNSUPPORTED_OPTION', name)
    t.equal(r.body.param, 'job_id', `${name}: param job_id`)
  }
  t.equal(await balance(s, u), before, 'nothing charged')
  await s.req('DELETE', `/v1/jobs/${queued.body.id}`, { key: u.key })
})

t.test('extend validation and credits: 400 without prompt or job_id, 402 when the balance is short', async (t) => {
  const u = await paidUser(s, 150)
  const src = await completedVideo(u)
  assertError(t, await extend(u, { job_id: src }), 400, 'VALIDATION_ERROR', 'no prompt')
  assertError(t, await extend(u, { prompt: 'p' }), 400, 'VALIDATION_ERROR', 'no job_id')
  assertError(t, await extend(u, { job_id: src, prompt: 'x'.repeat(5001) }), 400, 'VALIDATION_ERROR', 'prompt over 5000')
  assertError(t, await extend(u, { job_id: src, prompt: 'p' }), 402, 'INSUFFICIENT_CREDITS', '30 credits left')
  t.equal(await balance(s, u), 30)
})

t.test('on the free trial an extension counts as the next video: 403 upgrade_required', async (t) => {
  const u = await createUser(s, { credits: 400 })
  const src = await completedVideo(u)
  const r = await extend(u, { job_id: src, prompt: 'more' })
  assertError(t, r, 403, 'upgrade_required')
  t.type(r.body.pricing_url, 'string')
  t.equal(await balance(s, u), 280)
})
