// The shared pieces of the provider adapters (src/providers/http.ts): Retry-After, the status
// mapping, content-policy wording and progress from logs.
import t from 'tap'
import { looksLikeContentPolicy, parseRetryAfter, progressFromLogs, raiseForStatus } from '../../src/providers/http.js'
import { UpstreamRefused, UpstreamUnavailable } from '../../src/providers/upstream.js'

const res = (status: number, json: any = null, headers: Record<string, string> = {}) => ({ status, json, headers, text: json ? JSON.stringify(json) : '' })

t.test('Retry-After: delta seconds or an HTTP date; anything else is null', async (t) => {
  const now = Date.parse('2026-11-22T21:00:00Z')
  t.equal(parseRetryAfter('0', now), 0)
  t.equal(parseRetryAfter(' 120 ', now), 120_000)
  t.equal(parseRetryAfter('Sun, 22 Nov 2026 21:00:30 GMT', now), 30_000)
  t.equal(parseRetryAfter('Sun, 22 Nov 2026 20:59:00 GMT', now), 0, 'a date in the past: now')
  t.equal(parseRetryAfter(undefined, now), null)
  t.equal(parseRetryAfter('soon', now), null)
  t.equal(parseRetryAfter('-5', now), null)
})

t.test('raiseForStatus: 2xx passes; 408, 429 and 5xx indefinite (with Retry-After); other 4xx refused, with the detail', async (t) => {
  t.equal(raiseForStatus('p', res(201, { id: 'x' })).status, 201)
  for (const s of [408, 429, 500, 502, 503, 504, 599]) {
    const e = (() => { try { raiseForStatus('p', res(s, { detail: 'busy' }, { 'retry-after': '3' })) } catch (e) { return e } })() as UpstreamUnavailable
    t.type(e, UpstreamUnavailable, String(s))
    t.equal(e.retryAfterMs, 3000)
    t.equal(e.httpStatus, s)
  }
  for (const s of [400, 401, 402, 403, 404, 409, 413, 422]) {
    const e = (() => { try { raiseForStatus('p', res(s, { title: 'Bad', detail: 'input.prompt is required' })) } catch (e) { return e } })() as UpstreamRefused
    t.type(e, UpstreamRefused, String(s))
    t.match(e.message, /^p: HTTP \d+: input\.prompt is required$/)
  }
  const list = (() => { try { raiseForStatus('p', res(422, { detail: [{ msg: 'a' }, { msg: 'b' }] })) } catch (e) { return e } })() as Error
  t.match(list.message, /a; b/, 'a validation list reads as text')
})

t.test('content-policy wording', async (t) => {
  for (const yes of ['content_policy_violation', 'Content policy violation', 'NSFW content detected', 'The input or output was flagged as sensitive. (E005)', 'blocked by the safety checker', 'rejected by moderation']) t.ok(looksLikeContentPolicy(yes), yes)
  for (const no of ['CUDA out of memory', 'timeout', '', null, undefined, 'E0050 something']) t.notOk(looksLikeContentPolicy(no as any), String(no))
})

t.test('progress: the last percentage in the logs', async (t) => {
  t.equal(progressFromLogs('loading\n 10%|#   |\n 55%|#####|\n'), 55)
  t.equal(progressFromLogs('step 3\r 70%|######'), 70)
  t.equal(progressFromLogs('no numbers here'), undefined)
  t.equal(progressFromLogs('250% faster'), undefined, 'not a progress')
  t.equal(progressFromLogs(''), undefined)
  t.equal(progressFromLogs(null), undefined)
})
