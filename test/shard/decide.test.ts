// The account's decision core (src/shard/decide.ts): every refusal of docs/api.md "Jobs"
// as a pure function of (state, request), without threads or a database; each function here is
// one AccountActor.admit (or KeySlots, or the creation path) calls. The order across them
// (trial, then concurrency, then balance) is admit's and is checked end to end in
// test/http/generate.test.ts "refusals come in SPEC order".
import t from 'tap'
import { ApiError } from '../../src/errors.js'
import {
  bindIdem, decideIdempotency, isTrialVideo, mayBeStale, PRICING_URL, refuseAccount, refuseBalance, refuseConcurrency, refusedCharge, type Held, type IdemEntry,
} from '../../src/shard/decide.js'
import type { AccountView, JobSpec } from '../../src/domain.js'

const account = (o: Partial<AccountView> = {}): AccountView => ({
  id: 1, email: 'a@example.com', credits: 1000, has_purchased: true, enterprise: false, banned: false, credits_locked: false, email_verified: true, free_videos_used: 0, ...o,
})
const spec = (o: Partial<JobSpec> = {}): JobSpec => ({
  type: 'image', model: 'nano-banana', prompt: 'p', credits: 10, estimated_seconds: 15, request: {}, directiveText: 'p', ...o,
})
const video = spec({ type: 'video', model: 'seedance-2-mini', credits: 50 })
const none: Held = { credits: 0, trialVideos: 0 }
const pro = { maxConcurrent: 10 }

function code (e: ApiError | null): string | null { return e === null ? null : e.code }

t.test('a covered request on a clean account goes ahead', async (t) => {
  t.equal(refuseAccount(account(), none, spec()), null)
  t.equal(refuseConcurrency(pro, 9), null, 'one slot left')
  t.equal(refuseBalance(account(), none, video), null)
})

t.test('403 ACCOUNT_BANNED comes first among the account refusals', async (t) => {
  const e = refuseAccount(account({ banned: true, has_purchased: false, free_videos_used: 1, credits_locked: true, email_verified: false }), none, video)
  t.equal(code(e), 'ACCOUNT_BANNED')
  t.equal(e!.status, 403)
  t.equal(code(refuseAccount(account({ credits_locked: true, has_purchased: false, free_videos_used: 1 }), none, video)), 'NOT_ELIGIBLE', 'the lock before the trial')
})

t.test('403 NOT_ELIGIBLE when credits are locked, with the reason', async (t) => {
  const e = refuseAccount(account({ credits_locked: true }), none, spec())
  t.equal(code(e), 'NOT_ELIGIBLE')
  t.equal(e!.status, 403)
  t.same(e!.extra, { reason: 'credits_locked', reasons: ['credits_locked'] })
})

t.test('403 upgrade_required: one free video before the first purchase, then the pricing link', async (t) => {
  const free = account({ has_purchased: false, credits: 200 })
  t.equal(refuseAccount(free, none, video), null, 'the first video is the free one')
  t.ok(isTrialVideo(free, video))
  t.ok(isTrialVideo(free, spec({ type: 'extend', model: 'veo3-fast' })), 'an extension counts as a video')
  t.notOk(isTrialVideo(free, spec()), 'images are not trial videos')
  const used = refuseAccount(account({ has_purchased: false, free_videos_used: 1 }), none, video)
  t.equal(code(used), 'upgrade_required')
  t.equal(used!.status, 403)
  t.same(used!.extra, { pricing_url: PRICING_URL })
  t.equal(code(refuseAccount(free, { credits: 50, trialVideos: 1 }, video)), 'upgrade_required', 'a pending trial video holds it')
  t.equal(refuseAccount(account({ has_purchased: false, free_videos_used: 1 }), none, spec()), null, 'images stay allowed')
  t.equal(refuseAccount(account({ has_purchased: false, enterprise: true, free_videos_used: 3 }), none, video), null, 'enterprise has no trial limit')
})

t.test('429 concurrency_limit_reached at the key cap, with the figures', async (t) => {
  const e = refuseConcurrency(pro, 10)
  t.equal(code(e), 'concurrency_limit_reached')
  t.equal(e!.status, 429)
  t.match(e!.extra, { max_concurrent: 10, in_flight: 10 })
  t.type(e!.extra!.retry_after, 'number', 'every 429 carries retry_after (src/errors.ts)')
  t.equal(refuseConcurrency({ maxConcurrent: 3 }, 2), null)
  t.equal(code(refuseConcurrency({ maxConcurrent: 0 }, 0)), 'concurrency_limit_reached', 'a zero cap refuses everything')
})

t.test('402 INSUFFICIENT_CREDITS: the balance net of holds must cover the price', async (t) => {
  const e = refuseBalance(account({ credits: 40 }), none, video)
  t.equal(code(e), 'INSUFFICIENT_CREDITS')
  t.equal(e!.status, 402)
  t.same(e!.extra, { required: 50, available: 40 })
  t.equal(refuseBalance(account({ credits: 50 }), none, video), null, 'exactly enough')
  t.same(refuseBalance(account({ credits: 50 }), { credits: 20, trialVideos: 0 }, video)!.extra, { required: 50, available: 30 }, 'pending creations hold credits')
  t.same(refuseBalance(account({ credits: 10 }), { credits: 30, trialVideos: 0 }, video)!.extra, { required: 50, available: 0 }, 'never shows a negative balance')
})

t.test('a charge the database refused answers upgrade_required or 402 from the reloaded row', async (t) => {
  t.equal(refusedCharge(account({ has_purchased: false, free_videos_used: 1 }), true, video).code, 'upgrade_required')
  t.equal(refusedCharge(account({ has_purchased: false, free_videos_used: 0, credits: 10 }), true, video).code, 'INSUFFICIENT_CREDITS')
  const e = refusedCharge(account({ credits: 30 }), false, video)
  t.same([e.code, e.extra], ['INSUFFICIENT_CREDITS', { required: 50, available: 30 }])
})

t.test('idempotency: new, replay, wait for the first, 409 IDEMPOTENCY_CONFLICT', async (t) => {
  t.same(decideIdempotency(undefined, 'f1'), { kind: 'new' })
  t.same(decideIdempotency({ fingerprint: 'f1', jobId: 'job_1' }, 'f1'), { kind: 'replay', jobId: 'job_1' })
  const pending = Promise.resolve()
  t.same(decideIdempotency({ fingerprint: 'f1', pending }, 'f1'), { kind: 'wait', pending })
  const c = decideIdempotency({ fingerprint: 'f1', jobId: 'job_1' }, 'f2')
  t.equal(c.kind, 'refuse')
  if (c.kind === 'refuse') { t.equal(c.error.code, 'IDEMPOTENCY_CONFLICT'); t.equal(c.error.status, 409) }
  t.equal(decideIdempotency({ fingerprint: 'f1', pending }, 'f2').kind, 'refuse', 'a different body conflicts even while the first runs')
})

t.test('which refusals are worth a reload on several nodes', async (t) => {
  t.ok(mayBeStale(new ApiError('INSUFFICIENT_CREDITS')))
  t.ok(mayBeStale(new ApiError('upgrade_required')))
  t.notOk(mayBeStale(new ApiError('ACCOUNT_BANNED')))
  t.notOk(mayBeStale(new Error('x')))
})

t.test('bindIdem remembers the newest keys and never forgets one still pending', async (t) => {
  const idem = new Map<string, IdemEntry>()
  const pending = Promise.resolve()
  idem.set('k0', { fingerprint: 'f', pending })
  for (let i = 1; i <= 4; i++) bindIdem(idem, `k${i}`, `f${i}`, `job_${i}`, 3)
  t.same([...idem.keys()], ['k0', 'k3', 'k4'], 'the oldest settled keys past the bound are forgotten; the pending one stays')
  bindIdem(idem, 'k3', undefined, 'job_3b', 3)
  t.same([...idem.keys()], ['k0', 'k4', 'k3'], 'a rebound key moves to the newest place')
  t.same(idem.get('k3'), { fingerprint: '', jobId: 'job_3b' }, 'no fingerprint binds the empty one')
})
