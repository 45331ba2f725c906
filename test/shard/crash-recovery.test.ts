// Crash recovery (docs/architecture.md "Durability", "nothing acknowledged that is not committed"):
// the real service runs as a child process, is killed with SIGKILL in the middle of a burst of
// creations, and is restarted on the same database and DATA_DIR. Then every 201 the client saw
// has its job and its charge, every job has exactly one charge, the ledger adds up, the jobs
// left in flight resume and finish, and retries with the same Idempotency-Key create nothing twice.
import t from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { signSession } from '../../src/http/jwt.js'
import { freshDatabase } from '../helpers/db.js'
import { dbOf, image, UNLIMITED_TIERS, video } from '../helpers/jobs.js'
import { settled, waitFor } from '../helpers/wait.js'
import { ADMIN_TOKEN, JWT_SECRET } from '../helpers/server.js'
import { freePort } from '../helpers/net.js'

const MAIN = new URL('../../src/main.js', import.meta.url).pathname // dist/src/main.js

const databaseUrl = await freshDatabase(t)
const dataDir = await mkdtemp(join(tmpdir(), 'gjt-crash-'))
const port = await freePort()
const base = `http://127.0.0.1:${port}`
const env = {
  ...process.env,
  PORT: String(port),
  HOST: '127.0.0.1',
  DATABASE_URL: databaseUrl,
  ADMIN_TOKEN,
  JWT_SECRET,
  // veo3-fast: 110 s / 25 = 4.4 s of work, so many jobs are mid-flight at the kill;
  // deadlines max(4 x estimate, 600 s) / 25 = 24 s or more, well after the restart.
  SIM_SPEED: '25',
  SHARDS: '2',
  LOG_LEVEL: 'warn',
  DATA_DIR: dataDir,
  TIER_LIMITS: UNLIMITED_TIERS,
}

let child: ChildProcess | null = null
let stderr = ''

async function start (): Promise<void> {
  const c = spawn(process.execPath, [MAIN], { env, stdio: ['ignore', 'pipe', 'pipe'] })
  child = c
  c.stdout!.resume()
  c.stderr!.on('data', (d: Buffer) => { stderr = (stderr + d.toString()).slice(-20_000) })
  let exited = false
  await waitFor(async () => {
    if (c.exitCode !== null) return (exited = true)
    return (await fetch(`${base}/v1/health`)).status === 200
  // The bound only catches a service that never starts: a loaded machine makes it slow, not red.
  }, { what: () => `the service to answer /v1/health 200 (stderr: ${stderr})`, timeoutMs: 60_000, everyMs: 50 })
  if (exited) throw new Error(`service exited with ${c.exitCode}: ${stderr}`)
}

async function liveJobs (): Promise<number> {
  const [{ n }] = await sql<Array<{ n: number }>>`SELECT count(*)::int AS n FROM jobs WHERE status IN ('queued', 'submitted', 'processing')`
  return n
}

async function kill (): Promise<void> {
  const c = child!
  if (c.exitCode !== null || c.signalCode !== null) return
  const exited = new Promise(resolve => c.once('exit', resolve))
  c.kill('SIGKILL')
  await exited
}

t.teardown(async () => {
  if (child) await kill()
  await rm(dataDir, { recursive: true, force: true })
})

async function call (
  method: string, path: string, o: { body?: unknown; key?: string; jwt?: string; admin?: boolean; idem?: string } = {}
): Promise<{ status: number; body: any }> {
  const headers: Record<string, string> = {}
  if (o.body !== undefined) headers['content-type'] = 'application/json'
  if (o.key) headers['x-api-key'] = o.key
  if (o.jwt) headers.authorization = `Bearer ${o.jwt}`
  if (o.admin) headers.authorization = `Bearer ${ADMIN_TOKEN}`
  if (o.idem) headers['idempotency-key'] = o.idem
  const r = await fetch(base + path, { method, headers, body: o.body === undefined ? undefined : JSON.stringify(o.body), signal: AbortSignal.timeout(30_000) })
  const text = await r.text()
  let body: unknown = text
  try { body = JSON.parse(text) } catch {}
  return { status: r.status, body }
}

await start()
const sql = dbOf(t, { databaseUrl })

// Two paid accounts (on different shards when their ids differ in parity).
const users: Array<{ id: number; key: string }> = []
for (let i = 0; i < 2; i++) {
  const a = await call('POST', '/v1/admin/accounts', { admin: true, body: { email: `crash${i}_${Date.now()}@example.com`, password: 'correct horse battery', verified: true, credits: 100 } })
  if (a.status !== 201) throw new Error(`account: ${a.status} ${JSON.stringify(a.body)}`)
  const id = a.body.user_id as number
  const p = await call('POST', `/v1/admin/accounts/${id}/purchases`, { admin: true, body: { credits: 200_000 } })
  if (p.status !== 201) throw new Error(`purchase: ${p.status}`)
  const k = await call('POST', '/v1/auth/keys', { jwt: signSession(JWT_SECRET, id).token, body: { name: 'crash' } })
  if (k.status !== 201) throw new Error(`key: ${k.status}`)
  users.push({ id, key: k.body.key })
}

interface Sent { user: { id: number; key: string }; path: string; body: unknown; idem: string; status: number | 'lost'; id?: string }

function requestFor (i: number): { path: string; body: unknown } {
  const tag = `burst ${i}`
  switch (i % 5) {
    case 0: return { path: '/v1/generate/video', body: video(tag) }
    case 1: return { path: '/v1/generate/image', body: image(tag) }
    case 2: return { path: '/v1/generate/video', body: video(`${tag} [sim:fail]`) }
    case 3: return { path: '/v1/generate/audio', body: { model: 'music', title: 't', style: tag, instrumental: true } }
    default: return { path: '/v1/generate/video', body: { model: 'seedance-2-mini', prompt: tag, resolution: '480p', duration: '6' } }
  }
}

t.test('SIGKILL mid-burst, restart: acknowledged jobs are durable, charged once, resumed to a terminal state; retries create nothing twice', async (t) => {
  const sent: Sent[] = []
  let next = 0
  let acknowledged = 0
  let killed = false
  const TOTAL = 600
  // 40 clients in parallel; the kill comes once 150 creations have been acknowledged.
  const worker = async () => {
    while (next < TOTAL) {
      const i = next++
      const user = users[i % users.length]
      const { path, body } = requestFor(i)
      const s: Sent = { user, path, body, idem: `burst-${i}`, status: 'lost' }
      sent.push(s)
      try {
        const r = await call('POST', path, { key: user.key, body, idem: s.idem })
        s.status = r.status
        if (r.status === 201) { s.id = r.body.id; acknowledged++ }
      } catch {}
      if (!killed && acknowledged >= 150) { killed = true; await kill() }
      if (killed) return
    }
  }
  await Promise.all(Array.from({ length: 40 }, worker))
  t.ok(killed, 'killed mid-burst')
  const created = sent.filter(s => s.status === 201)
  const lost = sent.filter(s => s.status === 'lost')
  t.ok(created.length >= 150, `${created.length} creations acknowledged before the kill`)
  t.ok(lost.length > 0, `${lost.length} requests lost their answer to the kill`)
  t.same(sent.filter(s => s.status !== 201 && s.status !== 'lost').map(s => s.status), [], 'no other answers')

  // The database as the kill left it, before the restart touches anything.
  const rows = await sql`SELECT id, status FROM jobs`
  const inDb = new Set(rows.map(r => r.id))
  const missing = created.filter(s => !inDb.has(s.id!)).map(s => s.id)
  t.same(missing, [], 'every acknowledged job has its row')
  const chargeOf = new Map((await sql`SELECT job_id, count(*)::int AS n, sum(delta)::bigint AS d FROM credit_entries WHERE kind = 'charge' GROUP BY job_id`).map(r => [r.job_id, r]))
  t.same(created.filter(s => chargeOf.get(s.id!)?.n !== 1).map(s => s.id), [], 'every acknowledged job has exactly one charge')
  const badCharge = await sql`
    SELECT j.id FROM jobs j LEFT JOIN credit_entries e ON e.job_id = j.id AND e.kind = 'charge'
    GROUP BY j.id, j.credits_charged HAVING count(e.id) <> 1 OR coalesce(sum(e.delta), 0) <> -j.credits_charged`
  t.same(badCharge, [], 'every job row, acknowledged or not, has exactly one charge of its price')
  const drift = await sql`SELECT a.id FROM accounts a LEFT JOIN credit_entries e ON e.account_id = a.id GROUP BY a.id, a.credits HAVING a.credits <> coalesce(sum(e.delta), 0)`
  t.same(drift, [], 'credits = sum(entries) right after the crash')
  const inFlightAtKill = rows.filter(r => !['completed', 'failed', 'cancelled'].includes(r.status)).length
  t.ok(inFlightAtKill > 0, `${inFlightAtKill} jobs were in flight at the kill`)

  await start()

  // Jobs in flight at the kill resume and finish (no deadline is near: they really run).
  const live = await settled(() => liveJobs(), n => n === 0, { timeoutMs: 25_000, everyMs: 200 })
  t.equal(live, 0, 'every resumed job reached a terminal state')
  const timedOut = await sql`SELECT count(*)::int AS n FROM jobs WHERE error_message LIKE '%deadline%'`
  t.equal(timedOut[0].n, 0, 'resumed jobs finished on their own, not by the deadline')
  const outcome = await sql`SELECT status, (request->>'prompt' LIKE '%[sim:fail]%') AS fail, count(*)::int AS n FROM jobs GROUP BY 1, 2`
  t.same(outcome.filter(r => (r.fail && r.status !== 'failed') || (!r.fail && r.status !== 'completed')), [], '[sim:fail] jobs failed, all others completed')

  // Clients retry what they never got an answer for, with the same keys, and replay the rest.
  const retried = await Promise.all(lost.map(s => call('POST', s.path, { key: s.user.key, body: s.body, idem: s.idem })))
  t.ok(retried.every(r => r.status === 200 || r.status === 201), 'each lost request retried: 200 replay (it was committed) or 201 (it was not)')
  const replays = await Promise.all(created.slice(0, 50).map(s => call('POST', s.path, { key: s.user.key, body: s.body, idem: s.idem })))
  t.ok(replays.every((r, i) => r.status === 200 && r.body.replayed === true && r.body.id === created[i].id), 'acknowledged keys replay their original job after the restart')
  const dupKeys = await sql`SELECT idempotency_key FROM jobs GROUP BY account_id, idempotency_key HAVING count(*) > 1`
  t.same(dupKeys, [], 'one job per Idempotency-Key')
  const [{ n: jobs }] = await sql`SELECT count(*)::int AS n FROM jobs`
  t.equal(jobs, created.length + lost.length, 'exactly one job per request sent')

  // Final ledger: refunds for every failure, exactly once, and balances that add up.
  t.equal(await settled(() => liveJobs(), n => n === 0, { timeoutMs: 15_000, everyMs: 200 }), 0, 'the retried jobs reached a terminal state')
  const badRefund = await sql`
    SELECT j.id FROM jobs j LEFT JOIN credit_entries e ON e.job_id = j.id AND e.kind = 'refund'
    GROUP BY j.id HAVING (j.status = 'failed' AND (count(e.id) <> 1 OR sum(e.delta) <> j.credits_charged OR j.credits_refunded <> j.credits_charged))
      OR (j.status = 'completed' AND count(e.id) <> 0)`
  t.same(badRefund, [], 'each failed job refunded exactly once, completed ones never')
  const drift2 = await sql`SELECT a.id FROM accounts a LEFT JOIN credit_entries e ON e.account_id = a.id GROUP BY a.id, a.credits HAVING a.credits <> coalesce(sum(e.delta), 0)`
  t.same(drift2, [], 'credits = sum(entries) at the end')
  for (const u of users) {
    const r = await call('GET', '/v1/credits', { key: u.key })
    const [{ credits }] = await sql`SELECT credits FROM accounts WHERE id = ${u.id}`
    t.equal(r.body.credits, credits, `account ${u.id}: the restarted service reports the committed balance`)
  }
})
