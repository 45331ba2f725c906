// Jobs, docs/api.md "Jobs" (list envelope and credits_refunded: docs/api.md "Endpoints").
import t from 'tap'
import { assertError } from '../helpers/assert.js'
import { startServer } from '../helpers/server.js'
import { balance, dbOf, FAST_ENV, fetchResult, image, paidUser, pollJob, video } from '../helpers/jobs.js'
import { sleep } from '../helpers/wait.js'

const s = await startServer(t, FAST_ENV)
const sql = dbOf(t, s)
const ISO = (v: unknown) => typeof v === 'string' && new Date(v).toISOString() === v

t.test('GET /v1/jobs lists the caller\'s jobs newest first in {data, total, limit, offset, has_more}, with filters', async (t) => {
  const u = await paidUser(s, 1000)
  const other = await paidUser(s, 1000)
  await s.req('POST', '/v1/generate/image', { key: other.key, body: image() })

  const ids: string[] = []
  for (const body of [image('one'), image('two'), { model: 'gpt-image-2', prompt: 'three', resolution: '1K' }]) {
    const r = await s.req('POST', '/v1/generate/image', { key: u.key, body })
    t.equal(r.status, 201)
    ids.push(r.body.id)
  }
  const v = await s.req('POST', '/v1/generate/video', { key: u.key, body: video() })
  ids.push(v.body.id)
  const a = await s.req('POST', '/v1/generate/audio', { key: u.key, body: { model: 'voiceover', text: 'hello', voice_id: 'v' } })
  ids.push(a.body.id)
  const f = await s.req('POST', '/v1/generate/image', { key: u.key, body: image('[sim:fail]') })
  ids.push(f.body.id)
  await pollJob(s, u, f.body.id)
  await pollJob(s, u, v.body.id)

  const all = await s.req('GET', '/v1/jobs', { key: u.key })
  t.equal(all.status, 200)
  t.same(Object.keys(all.body).sort(), ['data', 'has_more', 'limit', 'offset', 'total'])
  t.equal(all.body.total, 6, 'only the caller\'s jobs')
  t.equal(all.body.limit, 20, 'default limit 20')
  t.equal(all.body.offset, 0)
  t.equal(all.body.has_more, false)
  t.same(all.body.data.map((j: any) => j.id), ids.slice().reverse(), 'newest first')
  const j0 = all.body.data.find((j: any) => j.id === v.body.id)
  for (const k of ['id', 'status', 'type', 'model', 'prompt', 'progress', 'credits_charged', 'credits_refunded', 'result_url', 'error_message', 'content_policy_violation', 'created_at', 'updated_at', 'completed_at']) {
    t.ok(k in j0, `item has ${k}`)
  }

  const page1 = await s.req('GET', '/v1/jobs?limit=2', { key: u.key })
  t.same(page1.body.data.map((j: any) => j.id), [ids[5], ids[4]])
  t.equal(page1.body.has_more, true)
  t.equal(page1.body.total, 6)
  const page3 = await s.req('GET', '/v1/jobs?limit=2&offset=4', { key: u.key })
  t.same(page3.body.data.map((j: any) => j.id), [ids[1], ids[0]])
  t.equal(page3.body.has_more, false)
  t.equal(page3.body.offset, 4)
  const past = await s.req('GET', '/v1/jobs?offset=50', { key: u.key })
  t.same(past.body.data, [])
  t.equal(past.body.has_more, false)

  const byType = await s.req('GET', '/v1/jobs?type=image', { key: u.key })
  t.equal(byType.body.total, 4)
  t.ok(byType.body.data.every((j: any) => j.type === 'image'))
  const audio = await s.req('GET', '/v1/jobs?type=audio', { key: u.key })
  t.same(audio.body.data.map((j: any) => j.id), [a.body.id])
  const byModel = await s.req('GET', '/v1/jobs?model=gpt-image-2', { key: u.key })
  t.same(byModel.body.data.map((j: any) => j.id), [ids[2]])
  const failed = await s.req('GET', '/v1/jobs?status=failed', { key: u.key })
  t.same(failed.body.data.map((j: any) => j.id), [f.body.id])
  const combo = await s.req('GET', '/v1/jobs?status=completed&type=video&model=veo3-fast', { key: u.key })
  t.same(combo.body.data.map((j: any) => j.id), [v.body.id])
  const none = await s.req('GET', '/v1/jobs?type=extend', { key: u.key })
  t.equal(none.body.total, 0)
  t.same(none.body.data, [])
})

t.test('GET /v1/jobs rejects out-of-range paging and unknown filter values with 400 VALIDATION_ERROR', async (t) => {
  const u = await paidUser(s, 10)
  for (const q of ['limit=0', 'limit=101', 'limit=abc', 'offset=-1', 'status=done', 'type=music']) {
    assertError(t, await s.req('GET', `/v1/jobs?${q}`, { key: u.key }), 400, 'VALIDATION_ERROR', q)
  }
  const edge = await s.req('GET', '/v1/jobs?limit=100', { key: u.key })
  t.equal(edge.status, 200)
  t.equal(edge.body.limit, 100)
  const one = await s.req('GET', '/v1/jobs?limit=1', { key: u.key })
  t.equal(one.status, 200)
})

t.test('GET /v1/jobs/{id}: own job 200; another account\'s job and malformed ids 404 JOB_NOT_FOUND', async (t) => {
  const u = await paidUser(s, 1000)
  const other = await paidUser(s, 1000)
  const r = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  const own = await s.req('GET', `/v1/jobs/${r.body.id}`, { key: u.key })
  t.equal(own.status, 200)
  t.equal(own.body.id, r.body.id)
  t.equal(own.body.type, 'image')
  t.equal(own.body.model, 'nano-banana')
  t.equal(own.body.prompt, 'a red apple on a table')
  t.equal(own.body.credits_charged, 10)
  t.ok(ISO(own.body.created_at) && ISO(own.body.updated_at), 'ISO timestamps')

  assertError(t, await s.req('GET', `/v1/jobs/${r.body.id}`, { key: other.key }), 404, 'JOB_NOT_FOUND', 'another account\'s job')
  for (const bad of ['nope', 'job_', 'job_AAAAAAAAAAAAAAAA', `job_${'x'.repeat(300)}`, '12345', 'job_%27%3B--aaaaaaaa']) {
    assertError(t, await s.req('GET', `/v1/jobs/${bad}`, { key: u.key }), 404, 'JOB_NOT_FOUND', `id ${bad.slice(0, 30)}`)
  }
  // After it finishes (served from the database as well as the cache), still private.
  await pollJob(s, u, r.body.id)
  assertError(t, await s.req('GET', `/v1/jobs/${r.body.id}`, { key: other.key }), 404, 'JOB_NOT_FOUND')
})

t.test('a video job reaches completed by polling: progress monotonic 0..100, completed_at set, result_url plays (MP4)', async (t) => {
  const u = await paidUser(s, 1000)
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: video() })
  t.equal(r.status, 201)
  const { job, seen } = await pollJob(s, u, r.body.id, { everyMs: 10 })
  t.equal(job.status, 'completed')
  t.equal(job.progress, 100)
  t.equal(job.credits_charged, 120)
  t.equal(job.credits_refunded, 0)
  t.equal(job.error_message, null)
  t.equal(job.content_policy_violation, false)
  t.ok(ISO(job.completed_at), 'completed_at set')
  t.ok(Date.parse(job.completed_at) >= Date.parse(job.created_at))
  t.ok(Date.parse(job.updated_at) >= Date.parse(job.created_at))
  const progress = seen.map(j => j.progress)
  t.ok(progress.every((p, i) => p >= 0 && p <= 100 && (i === 0 || p >= progress[i - 1])), `progress is monotonic: ${progress.join(',')}`)
  const order = ['queued', 'submitted', 'processing', 'completed']
  const ranks = seen.map(j => order.indexOf(j.status))
  t.ok(ranks.every((x, i) => x >= 0 && (i === 0 || x >= ranks[i - 1])), `statuses only move forward: ${[...new Set(seen.map(j => j.status))].join(' -> ')}`)
  t.ok(seen.some(j => j.status === 'processing' && j.progress > 0 && j.progress < 100), 'processing with partial progress was observed')
  t.equal(seen.filter(j => j.status !== 'completed').every(j => j.result_url === null && j.completed_at === null), true, 'no result before completion')

  t.match(job.result_url, /\/files\/.+\.mp4$/)
  const f = await fetchResult(s, job.result_url)
  t.equal(f.status, 200)
  t.equal(f.headers.get('content-type'), 'video/mp4')
  const bytes = Buffer.from(await f.arrayBuffer())
  t.equal(Number(f.headers.get('content-length')), bytes.length, 'Content-Length')
  t.equal(bytes.toString('latin1', 4, 8), 'ftyp', 'an MP4 (ISO BMFF ftyp box first)')
  const range = await fetchResult(s, job.result_url, { headers: { range: 'bytes=0-99' } })
  t.equal(range.status, 206, 'Range requests are served (browsers seek in video)')
  t.equal((await range.arrayBuffer()).byteLength, 100)
})

t.test('[sim:fail] and [sim:policy]: failed, credits_refunded = credits_charged, content_policy_violation for policy, balance restored', async (t) => {
  const u = await paidUser(s, 1000)
  const f = await s.req('POST', '/v1/generate/video', { key: u.key, body: video('boom [sim:fail]') })
  const p = await s.req('POST', '/v1/generate/image', { key: u.key, body: { model: 'nano-banana-pro', prompt: 'edgy [sim:policy]' } })
  t.equal(f.status, 201)
  t.equal(p.status, 201)
  // Each 201 carries the balance its own charge committed (a refund may already have landed
  // by the time a later GET looks, so the charge is checked on the answers, not by polling).
  t.equal(f.body.remaining_credits, 1000 - 120, 'the video charged up front')
  t.ok([1000 - 120 - 30, 1000 - 30].includes(p.body.remaining_credits), 'the image charged up front (after or before the video\'s refund)')

  const fj = (await pollJob(s, u, f.body.id)).job
  t.equal(fj.status, 'failed')
  t.equal(fj.credits_charged, 120)
  t.equal(fj.credits_refunded, 120)
  t.equal(fj.content_policy_violation, false)
  t.type(fj.error_message, 'string')
  t.equal(fj.result_url, null)
  t.ok(ISO(fj.completed_at), 'completed_at marks the terminal time')

  const pj = (await pollJob(s, u, p.body.id)).job
  t.equal(pj.status, 'failed')
  t.equal(pj.credits_refunded, 30)
  t.equal(pj.content_policy_violation, true)
  t.type(pj.error_message, 'string')

  t.equal(await balance(s, u), 1000, 'every credit back')
  // Provider-side policy flags are refunds, not screen violations: the account is not suspended.
  const again = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  t.equal(again.status, 201)
})

t.test('DELETE of a queued job cancels it with a full refund; a second DELETE is 409 CANNOT_CANCEL', async (t) => {
  const u = await paidUser(s, 1000)
  const q = await s.req('POST', '/v1/generate/video', { key: u.key, body: video('wait [sim:queue]') })
  t.equal(q.status, 201)
  t.equal(q.body.status, 'queued')
  t.equal(q.body.credits_charged, 120, 'queued jobs are charged')
  await sleep(200) // time: proves the queued job does not move on within a window
  const g = await s.req('GET', `/v1/jobs/${q.body.id}`, { key: u.key })
  t.equal(g.body.status, 'queued', 'stays queued')
  t.equal(await balance(s, u), 880)

  const d = await s.req('DELETE', `/v1/jobs/${q.body.id}`, { key: u.key })
  t.equal(d.status, 200)
  t.equal(d.body.id, q.body.id)
  t.equal(d.body.status, 'cancelled')
  t.equal(d.body.credits_refunded, 120)
  t.ok(ISO(d.body.completed_at))
  t.equal(await balance(s, u), 1000, 'refunded')
  const after = await s.req('GET', `/v1/jobs/${q.body.id}`, { key: u.key })
  t.equal(after.body.status, 'cancelled')
  assertError(t, await s.req('DELETE', `/v1/jobs/${q.body.id}`, { key: u.key }), 409, 'CANNOT_CANCEL', 'already cancelled')
  t.equal(await balance(s, u), 1000, 'no second refund')
})

t.test('DELETE of a submitted or completed job is 409 CANNOT_CANCEL; of another account\'s or a malformed id 404 JOB_NOT_FOUND', async (t) => {
  const u = await paidUser(s, 2000)
  const other = await paidUser(s, 1000)
  // lipsync: 695 s / 200 = 3.5 s of work, so it is still running.
  const running = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'lipsync', prompt: 'slow', resolution: '480p', image_url: 'https://example.com/face.png', audio_url: 'https://example.com/voice.mp3', audio_duration: 5 } })
  t.equal(running.status, 201)
  t.equal(running.body.status, 'submitted')
  const d1 = await s.req('DELETE', `/v1/jobs/${running.body.id}`, { key: u.key })
  assertError(t, d1, 409, 'CANNOT_CANCEL', 'submitted')
  t.equal(d1.body.status, 'submitted', 'the envelope says which state it is in')

  const img = await s.req('POST', '/v1/generate/image', { key: u.key, body: image() })
  await pollJob(s, u, img.body.id)
  assertError(t, await s.req('DELETE', `/v1/jobs/${img.body.id}`, { key: u.key }), 409, 'CANNOT_CANCEL', 'completed')

  const q = await s.req('POST', '/v1/generate/image', { key: u.key, body: image('[sim:queue]') })
  assertError(t, await s.req('DELETE', `/v1/jobs/${q.body.id}`, { key: other.key }), 404, 'JOB_NOT_FOUND', 'another account\'s queued job')
  t.equal((await s.req('GET', `/v1/jobs/${q.body.id}`, { key: u.key })).body.status, 'queued', 'untouched')
  assertError(t, await s.req('DELETE', '/v1/jobs/not-a-job', { key: u.key }), 404, 'JOB_NOT_FOUND', 'malformed id')
  assertError(t, await s.req('DELETE', '/v1/jobs/job_AAAAAAAAAAAAAAAA', { key: u.key }), 404, 'JOB_NOT_FOUND', 'unknown id')
  t.equal((await s.req('DELETE', `/v1/jobs/${q.body.id}`, { key: u.key })).status, 200)

  const done = (await pollJob(s, u, running.body.id)).job
  t.equal(done.status, 'completed', 'the refused cancel left the job running to completion')
  t.equal(await balance(s, u), 2000 - running.body.credits_charged - 10)
})

t.test('a job created without a prompt has no prompt field (it is typed a string): GET, the listing and TOON alike', async (t) => {
  const u = await paidUser(s, 1000)
  const r = await s.req('POST', '/v1/generate/video', { key: u.key, body: { model: 'seedance-2', image_url: 'https://example.com/first.png' } })
  t.equal(r.status, 201, r.text)
  const one = await s.req('GET', `/v1/jobs/${r.body.id}`, { key: u.key })
  t.equal(one.status, 200)
  t.notOk('prompt' in one.body, 'GET /v1/jobs/{id}: no prompt')
  await pollJob(s, u, r.body.id)
  const done = await s.req('GET', `/v1/jobs/${r.body.id}`, { key: u.key })
  t.notOk('prompt' in done.body, 'nor once it ended (a view from the cache)')
  const list = await s.req('GET', '/v1/jobs', { key: u.key })
  t.notOk('prompt' in list.body.data[0], 'GET /v1/jobs item: no prompt')
  const toon = await s.req('GET', `/v1/jobs/${r.body.id}`, { key: u.key, headers: { accept: 'application/toon' }, unchecked: true })
  t.equal(toon.status, 200)
  t.notMatch(toon.text, /prompt/, 'TOON leaves it out too, not null')
  const withPrompt = await s.req('POST', '/v1/generate/image', { key: u.key, body: image('a pear') })
  t.equal((await s.req('GET', `/v1/jobs/${withPrompt.body.id}`, { key: u.key })).body.prompt, 'a pear')
})

t.test('a voiceover, completed as it is created: updated_at is its completed_at, the same from GET, the listing and the database', async (t) => {
  const u = await paidUser(s, 1000)
  for (let i = 0; i < 3; i++) {
    const r = await s.req('POST', '/v1/generate/audio', { key: u.key, body: { model: 'voiceover', text: `hello ${i}`, voice_id: 'v1' } })
    t.equal(r.status, 201, r.text)
    const one = (await s.req('GET', `/v1/jobs/${r.body.id}`, { key: u.key })).body
    t.equal(one.status, 'completed')
    t.equal(one.updated_at, one.completed_at, 'GET /v1/jobs/{id}: updated_at is completed_at')
    const item = (await s.req('GET', '/v1/jobs?model=voiceover&limit=1', { key: u.key })).body.data[0]
    t.equal(item.id, r.body.id)
    t.equal(item.updated_at, one.updated_at, 'the listing says the same')
    const [row] = await sql<Array<{ updated_at: Date }>>`SELECT updated_at FROM jobs WHERE id = ${r.body.id}`
    t.equal(row.updated_at.toISOString(), one.updated_at, 'as does the row')
  }
})
