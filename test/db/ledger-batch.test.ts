// Creations written together: the group commit turns a batch of creations
// into one UPDATE of the accounts, one INSERT of ledger entries and one INSERT of jobs, each
// creation answering with the balance its own charge left; a batch an account cannot cover
// falls back to one creation at a time.
import t from 'tap'
import { connect } from '../../src/db/connect.js'
import { migrate } from '../../src/db/migrate.js'
import { ChargeRefused } from '../../src/db/ledger.js'
import type { ClaimedDelivery } from '../../src/db/webhooks.js'
import { CLAIM_LEASE_S } from '../../src/domain.js'
import { GroupCommit } from '../../src/shard/group-commit.js'
import type { JobRow } from '../../src/jobs/view.js'
import { freshDatabase } from '../helpers/db.js'
import { settled, sleep } from '../helpers/wait.js'

const sql = connect(await freshDatabase(t), { max: 2 })
t.teardown(() => sql.end({ timeout: 5 }))
await migrate(sql)

async function account (credits: number, o: { purchased?: boolean } = {}): Promise<number> {
  const [{ id }] = await sql<{ id: number }[]>`INSERT INTO accounts (email, password_hash, credits, has_purchased)
    VALUES (${`lb${Math.random()}@example.com`}, 'x', ${credits}, ${o.purchased ?? true}) RETURNING id`
  await sql`INSERT INTO credit_entries (account_id, delta, kind) VALUES (${id}, ${credits}, 'grant')`
  return id
}

let seq = 0
function row (accountId: number, credits: number, o: Partial<JobRow> = {}): JobRow {
  const now = new Date()
  return {
    id: `job_lb${String(++seq).padStart(14, '0')}`, account_id: accountId, key_id: null, type: 'image', model: 'nano-banana', status: 'submitted',
    prompt: 'p', request: { model: 'nano-banana', prompt: 'p', nested: { a: [1, 2] } }, progress: 0, credits_charged: credits, credits_refunded: 0,
    estimated_seconds: 15, result_url: null, error_message: null, content_policy_violation: false, provider: 'simulated', provider_job_id: `sim_${seq}`,
    idempotency_key: null, request_hash: null, source_job_id: null, free_trial: false, deadline_at: new Date(now.getTime() + 600_000),
    created_at: now, updated_at: now, completed_at: null, owner: 'node-a', lease_until: new Date(now.getTime() + 30_000), ...o,
  } as JobRow
}

const state = async (id: number) => (await sql<{ credits: number; sum: number; jobs: number; used: number }[]>`
  SELECT credits, free_videos_used AS used, (SELECT sum(delta)::int FROM credit_entries WHERE account_id = a.id) AS sum,
    (SELECT count(*)::int FROM jobs WHERE account_id = a.id) AS jobs FROM accounts a WHERE id = ${id}`)[0]

t.test('covered creations of two accounts commit in one transaction, each with its own balance', async (t) => {
  const a = await account(100)
  const b = await account(50)
  const gc = new GroupCommit(sql)
  const rows = [row(a, 30), row(b, 20), row(a, 30), row(a, 30), row(b, 20)]
  const got = await Promise.all(rows.map(r => gc.create(r)))
  t.same(got.map(g => g.credits), [70, 30, 40, 10, 10], 'each 201 would show the balance its charge left')
  t.same(gc.stats, { transactions: 1, items: 5, fallbacks: 0, together: 5 })
  t.same(await state(a), { credits: 10, used: 0, sum: 10, jobs: 3 })
  t.same(await state(b), { credits: 10, used: 0, sum: 10, jobs: 2 })
  const [j] = await sql<JobRow[]>`SELECT * FROM jobs WHERE id = ${rows[0].id}`
  t.same(j.request, rows[0].request, 'the request is stored as sent')
  t.equal(j.owner, 'node-a')
  t.equal(j.deadline_at.getTime(), rows[0].deadline_at.getTime())
})

t.test('an account its batch overdraws: the covered creations commit, the rest are refused', async (t) => {
  const a = await account(100)
  const b = await account(50)
  const gc = new GroupCommit(sql)
  const rows = [row(a, 30), row(b, 30), row(b, 30), row(a, 30)]
  const got = await Promise.allSettled(rows.map(r => gc.create(r)))
  t.same(got.map(g => g.status), ['fulfilled', 'fulfilled', 'rejected', 'fulfilled'])
  t.ok((got[2] as PromiseRejectedResult).reason instanceof ChargeRefused)
  t.same(await state(a), { credits: 40, used: 0, sum: 40, jobs: 2 })
  t.same(await state(b), { credits: 20, used: 0, sum: 20, jobs: 1 }, 'nothing of the refused creation was written')
})

t.test('two free-trial videos of one account in one batch: only one is charged', async (t) => {
  const a = await account(200, { purchased: false })
  const gc = new GroupCommit(sql)
  const got = await Promise.allSettled([row(a, 50, { type: 'video', free_trial: true }), row(a, 50, { type: 'video', free_trial: true })].map(r => gc.create(r)))
  t.same(got.map(g => g.status).sort(), ['fulfilled', 'rejected'])
  t.same(await state(a), { credits: 150, used: 1, sum: 150, jobs: 1 })
})

t.test('completions of a batch are written together: job rows, library rows (a video with its media) and outbox rows', async (t) => {
  const a = await account(1000)
  const b = await account(1000)
  await sql`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${a}, 'https://hooks.example/a', 's1', ${['job.completed']}),
    (${b}, 'https://hooks.example/b', 's2', ${['job.failed']})`
  const gc = new GroupCommit(sql)
  const rows = [row(a, 10), row(a, 10, { type: 'video', model: 'seedance-2-mini', request: { aspect_ratio: '9:16', webhook_url: 'https://hooks.example/job', webhook_secret: 'x' } }), row(b, 10), row(b, 10)]
  await Promise.all(rows.map(r => gc.create(r)))
  await sql`UPDATE jobs SET status = 'failed' WHERE id = ${rows[3].id}` // already terminal: left alone
  const at = new Date()
  const before = gc.stats.together
  const media = { thumbnailUrl: 'https://files.example/thumb.jpg', embedUrl: (token: string) => `https://app.example/embed/${token}` }
  const done = await Promise.all(rows.map(r => gc.complete({ row: r, resultUrl: `https://files.example/${r.id}`, at }, { media })))
  t.same(done, [true, true, true, false])
  t.equal(gc.stats.together - before, 4, 'the images and the video in one statement')
  const jobs = await sql<{ id: string; status: string; result_url: string | null }[]>`SELECT id, status, result_url FROM jobs WHERE id = ANY(${rows.map(r => r.id)}) ORDER BY id`
  t.same(jobs.map(j => j.status), ['completed', 'completed', 'completed', 'failed'])
  t.equal(jobs[0].result_url, `https://files.example/${rows[0].id}`)
  const images = await sql`SELECT job_id, model, model_id FROM images WHERE job_id = ANY(${rows.map(r => r.id)}) ORDER BY job_id`
  t.same(images.map(i => i.job_id), [rows[0].id, rows[2].id])
  t.equal(images[0].model, 'simulated/nano-banana')
  const [v] = await sql`SELECT job_id, aspect_ratio, video_url, model, thumbnail_url, embed_token, embed_url, extended_from_video_id FROM videos WHERE job_id = ${rows[1].id}`
  t.match({ ...v }, {
    job_id: rows[1].id, aspect_ratio: '9:16', video_url: `https://files.example/${rows[1].id}`, model: 'simulated/seedance-2-mini',
    thumbnail_url: 'https://files.example/thumb.jpg', embed_token: /^[A-Za-z0-9_-]{32}$/, extended_from_video_id: null,
  })
  t.equal(v.embed_url, `https://app.example/embed/${v.embed_token}`, 'the embed page is addressed by its token')
  // An extension of that video, completed alone: the batch statement with one row links it to the video it extends.
  const ext = row(a, 10, { type: 'extend', model: 'seedance-2-mini', source_job_id: rows[1].id, request: {} })
  await gc.create(ext)
  t.equal(await gc.complete({ row: ext, resultUrl: 'https://files.example/ext.mp4', at }), true)
  const [e] = await sql`SELECT aspect_ratio, extended_from_video_id, embed_token FROM videos WHERE job_id = ${ext.id}`
  const [src] = await sql`SELECT id FROM videos WHERE job_id = ${rows[1].id}`
  t.same({ ...e }, { aspect_ratio: null, extended_from_video_id: src.id, embed_token: null }, 'an extension has no default aspect ratio; no media given, none stored')
  const dl = await sql<{ job_id: string; url: string; event: string; body: string }[]>`SELECT job_id, url, event, body FROM webhook_deliveries WHERE job_id = ANY(${rows.map(r => r.id)}) ORDER BY job_id, url`
  t.same(dl.map(d => [d.job_id, d.url]), [[rows[0].id, 'https://hooks.example/a'], [rows[1].id, 'https://hooks.example/a'], [rows[1].id, 'https://hooks.example/job']],
    "account a's subscribed hook for each of its jobs plus the job's own; b's hook wants only job.failed")
  t.equal(JSON.parse(dl[0].body).data.job.status, 'completed')
})

t.test('status transitions of a batch are one UPDATE; a job already terminal is not moved back', async (t) => {
  const a = await account(1000)
  const gc = new GroupCommit(sql)
  const rows = [row(a, 10), row(a, 10), row(a, 10)]
  await Promise.all(rows.map(r => gc.create(r)))
  await sql`UPDATE jobs SET status = 'completed', progress = 100, completed_at = now() WHERE id = ${rows[2].id}`
  const before = { ...gc.stats }
  const at = new Date(Date.now() + 1000)
  await Promise.all(rows.map((r, i) => gc.transition({ id: r.id, status: 'processing', progress: 5 + i, at })))
  t.same({ transactions: gc.stats.transactions - before.transactions, together: gc.stats.together - before.together }, { transactions: 1, together: 3 })
  const got = await sql<{ id: string; status: string; progress: number; updated_at: Date }[]>`
    SELECT id, status, progress, updated_at FROM jobs WHERE id = ANY(${rows.map(r => r.id)}) ORDER BY id`
  t.same(got.map(g => [g.status, g.progress]), [['processing', 5], ['processing', 6], ['completed', 100]])
  t.equal(got[0].updated_at.getTime(), at.getTime())
  // Alone (one item in its batch) it is the single-row statement, with the same guard.
  await gc.transition({ id: rows[2].id, status: 'processing', progress: 50, at })
  await gc.transition({ id: rows[0].id, status: 'processing', progress: 40, at })
  const [c, p] = await sql<{ status: string; progress: number }[]>`SELECT status, progress FROM jobs WHERE id IN (${rows[2].id}, ${rows[0].id}) ORDER BY id DESC`
  t.same([c.status, p.progress], ['completed', 40])
})

t.test('one completion statement: delivery ids shaped dlv_ + 16 base64url, one event per job; NOTIFY only when outbox rows were inserted', async (t) => {
  const hooked = await account(1000)
  const plain = await account(1000)
  await sql`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${hooked}, 'https://hooks.example/1', 's1', ${['job.completed']}),
    (${hooked}, 'https://hooks.example/2', 's2', ${['job.completed', 'job.failed']})`
  const gc = new GroupCommit(sql)
  const notes: number[] = []
  const l = await sql.listen('webhook_deliveries', () => { notes.push(Date.now()) })
  t.teardown(() => l.unlisten())
  const rows = [row(hooked, 10), row(plain, 10), row(plain, 10)]
  await Promise.all(rows.map(r => gc.create(r)))
  const at = new Date()
  // A batch of completions of the account without webhooks: no outbox row, no wake-up.
  t.same(await Promise.all(rows.slice(1).map(r => gc.complete({ row: r, resultUrl: `https://files.example/${r.id}`, at }))), [true, true])
  await sleep(300) // time: proves no NOTIFY arrives within a window (nothing else marks its absence)
  t.equal(notes.length, 0, 'no NOTIFY for a completion statement that inserted no outbox row')
  t.same(await gc.complete({ row: rows[0], resultUrl: `https://files.example/${rows[0].id}`, at }), true)
  t.equal((await settled(() => notes.length, n => n > 0, { timeoutMs: 5000, everyMs: 20 })), 1, 'one NOTIFY once rows were inserted')
  const dl = await sql<{ id: string; event_id: string; webhook_id: number; body: string }[]>`
    SELECT id, event_id, webhook_id, body FROM webhook_deliveries WHERE job_id = ${rows[0].id} ORDER BY webhook_id`
  t.equal(dl.length, 2, 'one row per subscribed webhook')
  for (const d of dl) t.match(d.id, /^dlv_[A-Za-z0-9_-]{16}$/)
  t.not(dl[0].id, dl[1].id)
  t.equal(dl[0].event_id, dl[1].event_id, 'one event, delivered to each webhook')
  t.match(dl[0].event_id, /^evt_[A-Za-z0-9_-]{16}$/)
  const body = JSON.parse(dl[0].body)
  t.same({ id: body.id, type: body.type, job: body.data.job.id, status: body.data.job.status, result: body.data.job.result_url, at: body.created_at },
    { id: dl[0].event_id, type: 'job.completed', job: rows[0].id, status: 'completed', result: `https://files.example/${rows[0].id}`, at: at.toISOString() })
  t.equal(body.data.job.completed_at, at.toISOString())
})

t.test('completions of an account known to have no webhook carry no event; a webhook registered since fails the statement and the batch is written again with its events', async (t) => {
  const a = await account(1000)
  const b = await account(1000)
  const gc = new GroupCommit(sql)
  const rows = [row(a, 10), row(a, 10), row(b, 10), row(a, 10, { request: { webhook_url: 'https://hooks.example/own', webhook_secret: 'o' } }), row(a, 10), row(a, 10)]
  await Promise.all(rows.map(r => gc.create(r)))
  const at = new Date()
  const complete = (r: JobRow) => gc.complete({ row: r, resultUrl: `https://files.example/${r.id}`, at })
  const deliveries = async (r: JobRow) => (await sql<{ url: string; body: string }[]>`SELECT url, body FROM webhook_deliveries WHERE job_id = ${r.id} ORDER BY url`)
  t.notOk(gc.hookless.has(a), 'unknown before its first completion: the event is built')
  t.equal(await complete(rows[0]), true)
  t.ok(gc.hookless.has(a), 'the statement said the account has no webhook')
  // Known without webhooks: this one goes without its event (nothing to insert, nothing caught).
  const fallbacks = gc.stats.fallbacks
  t.equal(await complete(rows[1]), true)
  t.equal(gc.stats.fallbacks, fallbacks, 'written in one statement')
  t.same(await deliveries(rows[1]), [])
  // The job's own webhook always gets its event, whatever the account has.
  t.equal(await complete(rows[3]), true)
  const own = await deliveries(rows[3])
  t.same(own.map(d => d.url), ['https://hooks.example/own'])
  t.equal(JSON.parse(own[0].body).data.job.status, 'completed')
  // A webhook registered behind the shard's back (another node's API): the next completion of a
  // sent without its event fails the statement; the batch (with b's completion) is written again.
  await sql`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${a}, 'https://hooks.example/late', 's', ${['job.completed']})`
  t.same(await Promise.all([complete(rows[4]), complete(rows[2])]), [true, true])
  t.equal(gc.stats.fallbacks, fallbacks + 1, 'the guard failed the first statement')
  const late = await deliveries(rows[4])
  t.same(late.map(d => d.url), ['https://hooks.example/late'], 'the event reached the new webhook')
  t.equal(JSON.parse(late[0].body).data.job.id, rows[4].id)
  t.equal(JSON.parse(late[0].body).data.job.result_url, `https://files.example/${rows[4].id}`)
  t.notOk(gc.hookless.has(a), 'the account is known to have a webhook now')
  // Alone in its batch the guard works too: a's webhook deleted, then b learnt, then b given one.
  await sql`UPDATE webhooks SET deleted_at = now() WHERE account_id = ${a}`
  t.equal(await complete(rows[5]), true)
  t.ok(gc.hookless.has(a), 'learnt again: no webhook')
  t.ok(gc.hookless.has(b))
  const more = row(b, 10)
  await gc.create(more)
  await sql`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${b}, 'https://hooks.example/b', 's', ${['job.completed']})`
  t.equal(await complete(more), true)
  t.equal(gc.stats.fallbacks, fallbacks + 2)
  t.same((await deliveries(more)).map(d => d.url), ['https://hooks.example/b'])
  const [j] = await sql<{ status: string }[]>`SELECT status FROM jobs WHERE id = ${more.id}`
  t.equal(j.status, 'completed')
})

t.test('with hand-off, completions insert their outbox rows claimed for the lease and hand them over once committed; no pool is woken or can claim them', async (t) => {
  const hooked = await account(1000)
  await sql`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${hooked}, 'https://hooks.example/h1', 'hs1', ${['job.completed']}),
    (${hooked}, 'https://hooks.example/h2', 'hs2', ${['job.failed']})`
  const handed: ClaimedDelivery[][] = []
  const gc = new GroupCommit(sql, undefined, rows => { handed.push(rows) })
  const payloads: string[] = []
  const l = await sql.listen('webhook_deliveries', (p) => { payloads.push(p) })
  t.teardown(() => l.unlisten())
  const own = { webhook_url: 'https://hooks.example/own', webhook_secret: 'own-secret' }
  const rows = [row(hooked, 10), row(hooked, 10, { request: { model: 'nano-banana', prompt: 'p', ...own } })]
  const voice = row(hooked, 10, { type: 'audio', model: 'voiceover', status: 'completed', progress: 100, result_url: 'http://127.0.0.1/h.mp3', completed_at: new Date() })
  await Promise.all([...rows, voice].map(r => gc.create(r)))
  t.equal(handed.length, 1, 'the born-completed creation\'s row was handed once its transaction committed')
  const at = new Date()
  t.same(await Promise.all(rows.map(r => gc.complete({ row: r, resultUrl: `https://files.example/${r.id}`, at }))), [true, true])
  const all = handed.flat()
  t.equal(all.length, 4, 'one per subscribed webhook and job, plus the job\'s own webhook')
  const db = await sql<Array<{ id: string; job_id: string; webhook_id: number | null; url: string; secret: string; body: string; event_id: string; left: number }>>`
    SELECT id, job_id, webhook_id, url, secret, body, event_id, extract(epoch FROM claimed_until - now())::float8 AS left
    FROM webhook_deliveries WHERE job_id = ANY(${[...rows, voice].map(r => r.id)}) ORDER BY id`
  t.same(all.map(d => d.id).sort(), db.map(d => d.id), 'exactly the committed rows')
  for (const d of db) {
    const h = all.find(x => x.id === d.id)!
    const got = { job: h.job_id, webhook: h.webhook_id, url: h.url, secret: h.secret, body: h.body, event: h.event_id }
    const want = { job: d.job_id, webhook: d.webhook_id === null ? null : Number(d.webhook_id), url: d.url, secret: d.secret, body: d.body, event: d.event_id }
    t.same(got, want, `${d.id} handed as a claim would return it`)
    t.same({ account: h.account_id, attempts: h.attempts, active: h.hook_active }, { account: hooked, attempts: 0, active: true })
    t.ok(d.left > CLAIM_LEASE_S - 10 && d.left <= CLAIM_LEASE_S, `claimed for the lease (${d.left.toFixed(1)} s left)`)
  }
  t.ok(all.some(d => d.url === own.webhook_url && d.webhook_id === null), 'the job\'s own webhook is handed too')
  // claimDueDeliveries' own condition (a claim here would also take other tests' rows).
  const [due] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM webhook_deliveries
    WHERE id = ANY(${all.map(d => d.id)}) AND status = 'pending' AND next_attempt_at <= now() AND (claimed_until IS NULL OR claimed_until < now())`
  t.equal(due.n, 0, 'no pool can claim a handed row before its lease lapses')
  // Notifications arrive in commit order: a NOTIFY of the statements above would come before this one.
  await sql`SELECT pg_notify('webhook_deliveries', 'sentinel')`
  await settled(() => payloads.length, n => n > 0, { timeoutMs: 5000, everyMs: 10 })
  t.same(payloads, ['sentinel'], 'no pool was woken for rows already claimed')
  // Without hand-off (a node without a delivery pool): unclaimed rows and a NOTIFY, nothing handed.
  const plain = new GroupCommit(sql)
  const other = row(hooked, 10)
  await plain.create(other)
  t.same(await plain.complete({ row: other, resultUrl: 'https://files.example/o', at }), true)
  const [u] = await sql<{ claimed: boolean }[]>`SELECT claimed_until IS NOT NULL AS claimed FROM webhook_deliveries WHERE job_id = ${other.id}`
  t.equal(u.claimed, false, 'left unclaimed for any pool')
  await settled(() => payloads.length, n => n > 1, { timeoutMs: 5000, everyMs: 10 })
  t.same(payloads, ['sentinel', ''], 'and the pools are woken')
})

t.test('a creation born completed is charged in its batch statement and completed in the same transaction, with its outbox row', async (t) => {
  const a = await account(100)
  await sql`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${a}, 'https://hooks.example/v', 's', ${['job.completed']})`
  const gc = new GroupCommit(sql)
  const done = new Date(Date.now() - 5)
  const voice = row(a, 10, { type: 'audio', model: 'voiceover', status: 'completed', progress: 100, result_url: 'http://127.0.0.1/r.mp3', completed_at: done })
  const rows = [voice, row(a, 30), row(a, 20)]
  const settled: Array<{ credits: number; seq: number }> = []
  await Promise.all(rows.map(r => gc.create(r).then(c => { settled.push(c) })))
  t.same(gc.stats, { transactions: 1, items: 3, fallbacks: 0, together: 3 }, 'one transaction: the batch statement, then the completion')
  t.same(settled.map(c => c.credits), [90, 60, 40], 'each creation answers the balance its own charge left')
  const latest = settled.reduce((m, c) => (c.seq >= m.seq ? c : m))
  t.equal(latest.credits, (await state(a)).credits, 'the highest stamp (ties: the last to settle) carries the committed balance')
  const [j] = await sql<JobRow[]>`SELECT * FROM jobs WHERE id = ${voice.id}`
  t.match({ status: j.status, progress: j.progress, result_url: j.result_url }, { status: 'completed', progress: 100, result_url: 'http://127.0.0.1/r.mp3' })
  t.equal(j.completed_at!.getTime(), done.getTime())
  const dl = await sql<{ body: string }[]>`SELECT body FROM webhook_deliveries WHERE job_id = ${voice.id}`
  t.equal(dl.length, 1, 'its job.completed outbox row')
  t.equal(JSON.parse(dl[0].body).data.job.result_url, 'http://127.0.0.1/r.mp3')
  // Alone, and on an account that cannot pay: refused, nothing written.
  const poor = await account(5)
  const alone = row(poor, 10, { type: 'audio', model: 'voiceover', status: 'completed', progress: 100, result_url: 'http://127.0.0.1/p.mp3', completed_at: done })
  t.ok(await gc.create(alone).then(() => null, (e: unknown) => e) instanceof ChargeRefused, 'refused with ChargeRefused')
  t.same(await state(poor), { credits: 5, used: 0, sum: 5, jobs: 0 })
})

t.test('creations a batch could not charge are retried alone, after the batch: their stamps are later', async (t) => {
  const a = await account(50)
  const b = await account(100)
  const gc = new GroupCommit(sql)
  const rows = [row(a, 30), row(b, 10), row(a, 30)]
  const got = await Promise.allSettled(rows.map(r => gc.create(r)))
  t.same(got.map(g => g.status), ['fulfilled', 'fulfilled', 'rejected'], 'a cannot pay for both: its first is charged alone, its second refused')
  const [first, other] = got.map(g => (g as PromiseFulfilledResult<{ credits: number; seq: number }>).value)
  t.equal(first.credits, 20)
  t.ok(first.seq > other.seq, 'the retry ran after the batch statement')
  t.same(await state(a), { credits: 20, used: 0, sum: 20, jobs: 1 })
})

t.test('creations written together keep every text as sent (quotes, backslashes, commas, braces, NULL, unicode)', async (t) => {
  const a = await account(100)
  const gc = new GroupCommit(sql)
  const texts = ['say "hi", {then} \\ leave', 'NULL', 'null', '', ' spaced  ', 'back\\\\slash"', 'émoji 🌊 \t tab\nline', '{"a":1}']
  const rows = texts.map((p, i) => row(a, 1, {
    prompt: p, request: { model: 'nano-banana', prompt: p, list: [p, null], n: i }, idempotency_key: i % 2 ? p : null, request_hash: p, key_id: i % 3 ? i : null,
  }))
  await Promise.all(rows.map(r => gc.create(r)))
  t.equal(gc.stats.together, texts.length, 'written in one statement')
  const got = new Map((await sql<JobRow[]>`SELECT * FROM jobs WHERE account_id = ${a}`).map(j => [j.id, j]))
  for (const r of rows) {
    const j = got.get(r.id)!
    t.equal(j.prompt, r.prompt)
    t.same(j.request, r.request)
    t.equal(j.idempotency_key, r.idempotency_key)
    t.equal(j.request_hash, r.request_hash)
    t.equal(j.key_id, r.key_id)
    t.equal(j.lease_until!.getTime(), r.lease_until!.getTime())
    t.equal(j.created_at.getTime(), r.created_at.getTime())
  }
  t.same(await state(a), { credits: 100 - texts.length, used: 0, sum: 100 - texts.length, jobs: texts.length })
})

t.test('a batch of creations only is one statement without BEGIN/COMMIT; a batch with other work keeps its transaction', async (t) => {
  const a = await account(1000)
  let begins = 0
  // The same pool, counting explicit transactions.
  const counted = new Proxy(sql, {
    get (target, prop, receiver) {
      if (prop === 'begin') return (...args: unknown[]) => { begins++; return (target.begin as (...a: unknown[]) => unknown)(...args) }
      return Reflect.get(target, prop, receiver)
    },
  })
  const gc = new GroupCommit(counted)
  const got = await Promise.all([row(a, 10), row(a, 10), row(a, 10)].map(r => gc.create(r)))
  t.same(got.map(g => g.credits), [990, 980, 970], 'each creation answers the balance its own charge left')
  t.equal(begins, 0, 'no explicit transaction for creations alone')
  t.same(gc.stats, { transactions: 1, items: 3, fallbacks: 0, together: 3 })
  t.same(await state(a), { credits: 970, used: 0, sum: 970, jobs: 3 })
  const mixed = await Promise.all([gc.create(row(a, 10)), gc.create(row(a, 10)), gc.run(tx => tx`SELECT 1`)])
  t.equal(mixed.length, 3)
  t.equal(begins, 1, 'creations with other work share one transaction')
  t.same(await state(a), { credits: 950, used: 0, sum: 950, jobs: 5 })
})

t.test('a committed batch is answered only once the next batch has been sent', async (t) => {
  const a = await account(1000)
  const events: string[] = []
  let begins = 0
  let second: Array<Promise<unknown>> = []
  let gc: GroupCommit | null = null
  // The same pool, logging each transaction it is asked to open.
  const logged = new Proxy(sql, {
    get (target, prop, receiver) {
      if (prop !== 'begin') return Reflect.get(target, prop, receiver)
      return (...args: unknown[]) => {
        events.push(`transaction ${++begins}`)
        // While the first batch is in flight, the second queues behind it.
        if (begins === 1) setImmediate(() => { second = [gc!.create(row(a, 10)), gc!.run(tx => tx`SELECT 2`)] })
        return (target.begin as (...a: unknown[]) => unknown)(...args)
      }
    },
  })
  gc = new GroupCommit(logged)
  // Each caller resumes as an actor does (`await gc.create(...)`): one reaction on its own promise.
  const first = [gc.create(row(a, 10)), gc.run(tx => tx`SELECT 1`)]
  first[1].then(() => events.push('first answered'), () => {})
  const got = await Promise.all(first)
  await Promise.all(second)
  t.equal((got[0] as { credits: number }).credits, 990)
  t.same(events, ['transaction 1', 'transaction 2', 'first answered'], "the first batch's callers resume after the second batch's transaction was opened")
  t.same(gc.stats, { transactions: 2, items: 4, fallbacks: 0, together: 2 })
  t.same(await state(a), { credits: 980, used: 0, sum: 980, jobs: 2 })
})

t.test('completions with upstream history commit together: their events, and a late success for a job already refunded', async (t) => {
  const a = await account(1000)
  const gc = new GroupCommit(sql)
  const rows = [row(a, 10), row(a, 10), row(a, 10)]
  await Promise.all(rows.map(r => gc.create(r)))
  // The third failed (refunded) before its provider's success arrived.
  await sql`UPDATE jobs SET status = 'failed', completed_at = now() WHERE id = ${rows[2].id}`
  const route = 'nano-banana#0:fal:fal-ai/nano-banana'
  const at = new Date()
  const ev = (id: string, source: 'callback' | 'stored', state: string) => ({ job_id: id, source, route, state, detail: { n: source }, at })
  const before = { ...gc.stats }
  const got = await Promise.all([
    gc.complete({ row: rows[0], resultUrl: 'http://x/r0.png', at }, { history: { route, events: [ev(rows[0].id, 'callback', 'succeeded'), ev(rows[0].id, 'stored', 'succeeded')] } }),
    gc.complete({ row: rows[1], resultUrl: 'http://x/r1.png', at }),
    gc.complete({ row: rows[2], resultUrl: 'http://x/r2.png', at }, { history: { route, events: [ev(rows[2].id, 'callback', 'succeeded')] } }),
  ])
  t.same(got, [true, true, false], 'the refunded job is not completed')
  t.equal(gc.stats.transactions - before.transactions, 1, 'one transaction')
  t.equal(gc.stats.together - before.together, 3, 'all three in the batch statement')
  const events = await sql<{ job_id: string; source: string; route: string; state: string; detail: any }[]>`
    SELECT job_id, source, route, state, detail FROM job_upstream_events WHERE job_id IN ${sql(rows.map(r => r.id))} ORDER BY job_id, id`
  t.same(events.map(e => [e.job_id, e.source, e.state]), [
    [rows[0].id, 'callback', 'succeeded'], [rows[0].id, 'stored', 'succeeded'], [rows[2].id, 'late', 'succeeded'],
  ], 'the completed job\'s events in order; the refunded one gets only the late success')
  t.equal(events[0].route, route)
  t.same(events[0].detail, { n: 'callback' })
  t.match(events[2].detail, { result_url: 'http://x/r2.png', note: /no money moved/ })
  const [img] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM images WHERE job_id IN ${sql(rows.map(r => r.id))}`
  t.equal(img.n, 2, 'library rows for the two completed')
})

t.test('creations on configured routes commit together with their route, handle and first history; an uncovered account writes none of it', async (t) => {
  const a = await account(100)
  const poor = await account(5)
  const gc = new GroupCommit(sql)
  const route = 'nano-banana#1:fal:fal-ai/nano-banana'
  const at = new Date()
  const handle = { id: 'req-1', model: 'fal-ai/nano-banana', urls: { status: 'https://q/s', response: 'https://q/r', cancel: 'https://q/c' } }
  const r0 = row(a, 10, { provider: 'fal', provider_job_id: 'req-1' })
  const r1 = row(a, 10, { status: 'queued', provider: 'fal', provider_job_id: null })
  const r2 = row(a, 10) // the implicit simulated route: no record
  const r3 = row(poor, 10, { provider: 'fal', provider_job_id: 'req-3' })
  const ev = (id: string, source: 'refused' | 'submit', state: string) => ({ job_id: id, source, route, state, detail: { s: state } })
  const got = await Promise.allSettled([
    gc.create(r0, { route, upstream: handle, submitted_at: at, events: [ev(r0.id, 'refused', 'unavailable'), ev(r0.id, 'submit', 'submitted')] }),
    gc.create(r1, { route, upstream: null, submitted_at: null, events: [] }),
    gc.create(r2),
    gc.create(r3, { route, upstream: { id: 'req-3', model: 'm' }, submitted_at: at, events: [ev(r3.id, 'submit', 'submitted')] }),
  ])
  t.same(got.map(g => g.status), ['fulfilled', 'fulfilled', 'fulfilled', 'rejected'], 'the account that cannot pay is refused')
  t.equal(gc.stats.together, 4, 'all four went to the batch statement (the refused one was retried alone)')
  const jobs = await sql<{ id: string; route: string | null; upstream: any; submitted_at: Date | null }[]>`
    SELECT id, route, upstream, submitted_at FROM jobs WHERE id IN ${sql([r0.id, r1.id, r2.id, r3.id])} ORDER BY id`
  t.same(jobs.map(j => [j.id, j.route]), [[r0.id, route], [r1.id, route], [r2.id, null]], 'no row for the refused one')
  t.same(jobs[0].upstream, handle)
  t.equal(jobs[0].submitted_at?.getTime(), at.getTime())
  t.equal(jobs[1].upstream, null)
  t.equal(jobs[1].submitted_at, null)
  const events = await sql<{ job_id: string; source: string; state: string; detail: any }[]>`
    SELECT job_id, source, state, detail FROM job_upstream_events WHERE job_id IN ${sql([r0.id, r1.id, r2.id, r3.id])} ORDER BY id`
  t.same(events.map(e => [e.job_id, e.source, e.state]), [[r0.id, 'refused', 'unavailable'], [r0.id, 'submit', 'submitted']], 'in order; none for the refused account')
  t.same(events[1].detail, { s: 'submitted' })
  t.same(await state(poor), { credits: 5, used: 0, sum: 5, jobs: 0 })
})

/** The same pool, counting explicit transactions (BEGIN) and statements. */
function counting (): { sql: typeof sql; begins: () => number } {
  let begins = 0
  const counted = new Proxy(sql, {
    get (target, prop, receiver) {
      if (prop === 'begin') return (...args: unknown[]) => { begins++; return (target.begin as (...a: unknown[]) => unknown)(...args) }
      return Reflect.get(target, prop, receiver)
    },
  })
  return { sql: counted, begins: () => begins }
}

t.test('creations, completions and transitions of one batch are ONE statement without BEGIN/COMMIT', async (t) => {
  const a = await account(1000)
  const b = await account(1000)
  await sql`INSERT INTO webhooks (account_id, url, secret, events) VALUES (${a}, 'https://hooks.example/m', 's', ${['job.completed']})`
  const c = counting()
  const gc = new GroupCommit(c.sql)
  const old = [row(a, 10), row(a, 10), row(b, 10), row(b, 10)]
  await Promise.all(old.map(r => gc.create(r)))
  await sql`UPDATE jobs SET status = 'cancelled' WHERE id = ${old[3].id}` // already terminal: neither completed nor moved
  const before = { ...gc.stats }
  const at = new Date(Date.now() + 1000)
  const fresh = [row(a, 100), row(b, 100)]
  const got = await Promise.all([
    gc.create(fresh[0]),
    gc.complete({ row: old[0], resultUrl: 'https://files.example/m0', at }),
    gc.transition({ id: old[1].id, status: 'processing', progress: 42, at }),
    gc.create(fresh[1]),
    gc.complete({ row: old[3], resultUrl: 'https://files.example/m3', at }),
    gc.transition({ id: old[2].id, status: 'processing', progress: 7, at }),
    gc.transition({ id: old[3].id, status: 'processing', progress: 9, at }),
  ])
  t.equal(c.begins(), 0, 'no explicit transaction')
  t.same({ transactions: gc.stats.transactions - before.transactions, together: gc.stats.together - before.together, fallbacks: gc.stats.fallbacks },
    { transactions: 1, together: 7, fallbacks: 0 })
  t.same([(got[0] as { credits: number }).credits, got[1], got[2], (got[3] as { credits: number }).credits, got[4], got[5], got[6]],
    [880, true, undefined, 880, false, undefined, undefined])
  const jobs = await sql<{ id: string; status: string; progress: number }[]>`SELECT id, status, progress FROM jobs WHERE id = ANY(${[...old, ...fresh].map(r => r.id)})`
  const by = new Map(jobs.map(j => [j.id, [j.status, j.progress]]))
  t.same([...old, ...fresh].map(r => by.get(r.id)), [['completed', 100], ['processing', 42], ['processing', 7], ['cancelled', 0], ['submitted', 0], ['submitted', 0]])
  t.same(await state(a), { credits: 880, used: 0, sum: 880, jobs: 3 })
  const [dl] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE job_id = ${old[0].id}`
  t.equal(dl.n, 1, 'the completion wrote its outbox row')
  const [img] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM images WHERE job_id IN (${old[0].id}, ${old[3].id})`
  t.equal(img.n, 1, 'and its library row; the cancelled job none')
})

t.test('a transition its batch supersedes is not written twice: the completion (or the later transition) wins', async (t) => {
  const a = await account(1000)
  const gc = new GroupCommit(sql)
  const rows = [row(a, 10), row(a, 10)]
  await Promise.all(rows.map(r => gc.create(r)))
  const at = new Date(Date.now() + 1000)
  const got = await Promise.all([
    gc.transition({ id: rows[0].id, status: 'processing', progress: 90, at }),
    gc.complete({ row: rows[0], resultUrl: 'https://files.example/s0', at }),
    gc.transition({ id: rows[0].id, status: 'processing', progress: 95, at }),
    gc.transition({ id: rows[1].id, status: 'processing', progress: 10, at }),
    gc.transition({ id: rows[1].id, status: 'processing', progress: 20, at }),
  ])
  t.same(got, [undefined, true, undefined, undefined, undefined])
  const jobs = await sql<{ status: string; progress: number; result_url: string | null }[]>`
    SELECT status, progress, result_url FROM jobs WHERE id IN (${rows[0].id}, ${rows[1].id}) ORDER BY id`
  t.same(jobs.map(j => [j.status, j.progress, j.result_url]), [['completed', 100, 'https://files.example/s0'], ['processing', 20, null]])
})

t.test('a mixed batch with an account it cannot charge: the rest commits in the statement, the refused creation alone', async (t) => {
  const rich = await account(1000)
  const poor = await account(15)
  const c = counting()
  const gc = new GroupCommit(c.sql)
  const old = row(rich, 10)
  await gc.create(old)
  const at = new Date()
  const got = await Promise.allSettled([
    gc.create(row(poor, 10)), gc.create(row(poor, 10)), gc.complete({ row: old, resultUrl: 'https://files.example/p', at }), gc.create(row(rich, 10)),
  ])
  t.same(got.map(g => g.status), ['fulfilled', 'rejected', 'fulfilled', 'fulfilled'], 'the second creation of the poor account is refused')
  t.ok((got[1] as PromiseRejectedResult).reason instanceof ChargeRefused)
  t.equal((got[0] as PromiseFulfilledResult<{ credits: number }>).value.credits, 5, 'its first, retried alone, is charged')
  t.equal((got[2] as PromiseFulfilledResult<boolean>).value, true)
  t.same(await state(poor), { credits: 5, used: 0, sum: 5, jobs: 1 })
  t.same(await state(rich), { credits: 980, used: 0, sum: 980, jobs: 2 })
  t.equal(c.begins(), 0, 'the two creations retried alone are the batch statement with one row each: no explicit transaction, as for the batch')
})

t.test('a mixed batch whose statement fails: every item retried alone, only the bad one fails', async (t) => {
  const a = await account(1000)
  const gc = new GroupCommit(sql)
  const old = row(a, 10)
  await gc.create(old)
  const dup = row(a, 10, { id: old.id }) // a second job with the same id: the statement's INSERT fails
  const at = new Date()
  const fine = row(a, 10)
  const got = await Promise.allSettled([
    gc.create(fine), gc.create(dup), gc.transition({ id: old.id, status: 'processing', progress: 50, at }),
  ])
  t.same(got.map(g => g.status), ['fulfilled', 'rejected', 'fulfilled'])
  t.equal(gc.stats.fallbacks, 1)
  t.same(await state(a), { credits: 980, used: 0, sum: 980, jobs: 2 }, 'nothing of the failed creation was written')
  const [j] = await sql<{ status: string; progress: number }[]>`SELECT status, progress FROM jobs WHERE id = ${old.id}`
  t.same([j.status, j.progress], ['processing', 50])
})
