import { parentPort, workerData } from 'node:worker_threads'
import { createLogger } from '../log.js'
import { ApiError } from '../errors.js'
import { connect, containDriverFaults, DbHealth, dbUnavailable, isDbUnavailable, ping, within } from '../db/connect.js'
import { claimJobs, heldJobs, jobsByIdempotencyKeys, LEASE_MS, renewShardLease, saveProgress, type IdemRow } from '../db/jobs.js'
import type { JobRow } from '../jobs/view.js'
import { Providers } from '../providers/registry.js'
import { createStorage } from '../storage/index.js'
import { AccountActor, type ActorDeps } from './account-actor.js'
import { ActorTable } from './eviction.js'
import { GroupCommit } from './group-commit.js'
import { RedisInFlight, WaitingSlots } from './inflight.js'
import { nameThread, snapshotStats, trackMailboxes, trackSize } from '../worker-stats.js'
import { Channel, type ChannelOptions, type Handlers } from '../threads/channel.js'
import type { FromShard, ShardInit, ToShard } from './protocol.js'
import { specOfOrder } from '../jobs/spec.js'
import { jobsByIds, ownedActiveJobs } from '../db/upstream.js'
import { msOf, WaitingJobs, type WaitingJob } from './waiting.js'
import { TurnReads } from './turn-reads.js'

/**
 * A shard: one worker thread owning the actors of accounts `id mod N == shard`
 * (docs/architecture.md "Threads"), one PostgreSQL pool and one group commit. On start it resumes every
 * non-terminal job of its accounts.
 */
const init = workerData as ShardInit
const config = init.config
const log = createLogger(config.logLevel, { base: { shard: init.shard }, secrets: [config.adminToken ?? '', config.jwtSecret ?? '', config.metricsToken ?? ''] })
// A database outage is an expected event. A fault the driver throws from its own
// timers is contained (this shard and its actors live on); a stalled connection is cut.
containDriverFaults((msg, err) => log.error({ err }, msg))
const sql = connect(init.databaseUrl, { max: 4, stallMs: config.dbStallTimeoutMs })
// Callers wait a bounded time: once the database is known to be away, every pending and new
// message is answered 503 (its work runs on and settles when the database does).
const probeSql = connect(init.databaseUrl, { max: 1, stallMs: config.dbStallTimeoutMs })
const health = new DbHealth(() => ping(probeSql), 250, (up, why) => log.warn(up ? 'database reachable again' : `database unreachable (${why})`))
const commit = new GroupCommit(sql, undefined, init.handDeliveries === true ? (rows) => main.tell('deliveries', { rows }) : null)
const storage = await createStorage(config)
const deps: ActorDeps = {
  sql,
  commit,
  providers: await Providers.load(config, storage, init.shards, {
    shared: init.providerState, shard: init.shard, log: (msg, extra) => log.warn(extra ?? {}, msg),
  }),
  storage,
  simSpeed: config.simSpeed,
  submitTimeoutMs: config.submitTimeoutMs,
  publicBaseUrl: config.publicBaseUrl,
  resultRules: { allowlist: config.webhookAllowlist, maxBytes: config.resultMaxBytes, timeoutMs: config.resultTimeoutMs, attempts: 3 },
  violationThreshold: config.policyViolationLimit,
  nodeId: init.nodeId,
  multiNode: config.redisUrl !== undefined,
  inflight: config.redisUrl !== undefined ? new RedisInFlight(config.redisUrl, config.redisPrefix, LEASE_MS) : null,
  progress: new Map<string, { row: JobRow; since: number }>(),
  waiting: new WaitingJobs((due) => { void wakeDue(due) }),
  rows: new TurnReads<JobRow>(ids => within(jobsByIds(sql, ids)), r => r.id),
  idem: new TurnReads<IdemRow>(pairs => within(jobsByIdempotencyKeys(sql, pairs)), r => r.pair),
  emit: (ev) => { if (ev.type === 'job.updated') main.tell(ev.type, ev); else main.tell(ev.type, ev) },
  log: (level, msg, extra) => log[level](extra ?? {}, msg),
}

trackMailboxes(() => { let n = 0; for (const a of accounts.values()) n += a.mailbox.size; return n })
nameThread(`shard-${init.shard}`)
trackSize('account_actors', () => accounts.size)
trackSize('live_jobs', () => { let n = 0; for (const a of accounts.values()) n += a.jobs.size; return n })
trackSize('progress_pending', () => deps.progress.size)
trackSize('waiting_jobs', () => deps.waiting!.size)

// Idle actors are dropped after ACTOR_IDLE_S and rebuilt cold on next use (eviction.ts).
const accounts = new ActorTable((id) => new AccountActor(id, deps), config.actorIdleS * 1000)
accounts.start()
trackSize('actors_evicted', () => accounts.evicted)

function checkShard (id: number): void {
  if (!Number.isSafeInteger(id) || id <= 0 || id % init.shards !== init.shard) throw new ApiError('INTERNAL_ERROR', `account ${id} routed to the wrong shard`)
}
function account (id: number): AccountActor { checkShard(id); return accounts.get(id) }
/** One message for account `id`: the actor stays until it is answered. */
function on<T> (id: number, fn: (a: AccountActor) => Promise<T>): Promise<T> { checkShard(id); return accounts.use(id, fn) }

const handlers: Handlers<ToShard> = {
  'account.get': (m) => on(m.accountId, a => a.get()),
  'account.credit': (m) => on(m.accountId, a => a.credit(m)),
  'account.reload': (m) => on(m.accountId, a => a.reload()),
  'account.violation': (m) => on(m.accountId, a => a.violation()),
  // The prompt crossed once, inside the request: the spec is rebuilt from it here.
  'job.create': (m) => on(m.accountId, a => a.createJob({ ...m, spec: specOfOrder(m.spec) })),
  'job.cancel': (m) => on(m.accountId, a => a.live.cancel(m.jobId)),
  'batch.create': (m) => on(m.accountId, a => a.createBatch({ ...m, items: m.items.map(i => i.spec ? { ...i, spec: specOfOrder(i.spec) } : { ...i, spec: undefined }) })),
  'job.callback': (m) => on(m.accountId, a => a.live.callback(m.jobId, m.state, m.upstream, m.upstreamId)),
  'shard.routes': async () => deps.providers.states(),
  'shard.ping': async () => { await commit.idle(); return { shard: init.shard, actors: accounts.size } },
  'shard.stats': async () => snapshotStats(),
}
// Once the database is known to be away, a caller waits a bounded time (health.guard): every
// handler is wrapped once here, not per message.
for (const k of Object.keys(handlers) as Array<keyof typeof handlers>) {
  const h = handlers[k] as (m: unknown) => Promise<unknown>
  ;(handlers as Record<string, (m: unknown) => Promise<unknown>>)[k] = (m) => health.guard(h(m))
}

/** The same answers on every channel: the main thread's and each front-end thread's. */
const answers: ChannelOptions<ToShard> = {
  peer: 'front end',
  handlers,
  failure: (err, tag) => {
    if (isDbUnavailable(err)) return dbUnavailable()
    log.error({ err, type: tag }, 'shard handler failed')
    return new ApiError('INTERNAL_ERROR', 'Internal error; safe to retry with the same Idempotency-Key')
  },
}

const main = Channel.over<FromShard, ToShard>(parentPort!, {
  ...answers,
  peer: 'main thread',
  // A front-end thread's own channel to this shard (docs/decisions.md "Front-end threads"):
  // its requests are answered on the port they came from; events still go to the main thread.
  onTell: (m) => { if (m.tag === 'attach') Channel.over<FromShard, ToShard>(m.body.port, answers) },
})

/**
 * Waiting jobs that came due (docs/architecture.md "Waiting jobs"): their rows in one SELECT,
 * then each runs again in its account (whose actor is rebuilt if it was evicted meanwhile).
 * While the database is away they are put back and tried again a second later.
 */
async function wakeDue (due: WaitingJob[]): Promise<void> {
  let rows: JobRow[]
  try { rows = await jobsByIds(sql, due.map(r => r.id)) } catch (err) {
    health.report(err)
    deps.waiting!.retry(due, 1000)
    return
  }
  const byId = new Map<string, JobRow>()
  for (const r of rows) byId.set(r.id, r)
  for (const rec of due) {
    try { accounts.get(rec.account).live.wake(byId.get(rec.id), rec, true) } catch (err) {
      log.error({ err, job: rec.id }, 'waking a waiting job failed; trying again later')
      deps.waiting!.retry([rec], 5000)
    }
  }
}

// Job ownership (docs/architecture.md "Durability"): at start, take back what a previous run of this node left
// unfinished plus any job whose owner's shard stopped renewing; then keep renewing this shard's lease and
// keep claiming expired ones (a dead node's jobs resume here).
async function claim (reclaimOwn: boolean): Promise<void> {
  if (reclaimOwn) await renewShardLease(sql, init.nodeId, init.shard, init.shards)
  const rows = await claimJobs(sql, init.nodeId, init.shard, init.shards, reclaimOwn)
  for (const row of rows) account(row.account_id).live.resume(row)
  let n = rows.length
  if (reclaimOwn) {
    // The claim takes one page: the rest of what this node left is read page by page (a node
    // may hold far more jobs in flight than a page; docs/architecture.md "Waiting jobs").
    for (let after = ''; ;) {
      const page = await ownedActiveJobs(sql, init.nodeId, init.shard, init.shards, after)
      for (const row of page) account(row.account_id).live.resume(row)
      n += page.length
      if (page.length < 1000) break
      after = page[page.length - 1].id
    }
  }
  if (n) log.info({ jobs: n }, 'resumed unfinished jobs')
}
// The startup claim retries with backoff while the database is away: a shard that
// restarts during an outage waits for it instead of dying in a crash loop.
for (let attempt = 0; ; attempt++) {
  try { await claim(true); break } catch (err) {
    health.report(err)
    const ms = Math.min(5000, 100 * 2 ** attempt)
    log.warn({ err: String(err), retryInMs: ms }, 'startup claim failed; retrying')
    await new Promise(resolve => setTimeout(resolve, ms))
  }
}
// Waiting jobs' per-key slots last until their wake-up (several nodes; docs/architecture.md
// "Waiting jobs"): a renewal writes only those of jobs parked since the last one.
const waitingSlots = deps.inflight ? new WaitingSlots(deps.inflight, LEASE_MS, msOf) : null
// Every LEASE_MS / 3: renew this shard's lease (one row, docs/decisions.md "Shard leases"),
// drop our copies of jobs that ended or moved elsewhere, renew the Redis in-flight slots, and
// claim jobs whose shard stopped renewing (a dead node's jobs resume here).
const leaseTimer = setInterval(() => {
  const running = new Map<string, AccountActor>()
  for (const a of accounts.values()) for (const id of a.jobs.keys()) running.set(id, a)
  renewShardLease(sql, init.nodeId, init.shard, init.shards)
    .then(() => heldJobs(sql, init.nodeId, [...running.keys()]))
    .then(async (held) => {
      const slots = []
      for (const [id, a] of running) {
        const job = a.jobs.get(id)
        if (!job) continue
        // Ended or taken over elsewhere (cancelled on another node, lease lost): stop our copy.
        if (!held.has(id)) await a.live.dropped(job)
        else slots.push({ accountId: a.id, keyId: job.row.key_id, jobId: id })
      }
      await deps.inflight?.renew(slots)
      // Waiting jobs keep their per-key slots too: set once per parking, until their wake-up.
      await waitingSlots?.renew(deps.waiting!.values())
      await claim(false)
    })
    .catch((err) => { health.report(err); log.warn({ err: String(err) }, 'lease renewal failed') })
}, LEASE_MS / 3)
leaseTimer.unref()

// Progress ticks live in memory and reach GET and SSE as events; the table gets them in one
// statement per PROGRESS_FLUSH_MS, for the jobs whose first unwritten change
// is at least that old: a job that ends (or changes status) sooner never has its progress
// written separately, and stored progress is at most two intervals behind. Transitions are
// committed at once.
const PROGRESS_FLUSH_MS = 3000
const progressTimer = setInterval(() => {
  if (deps.progress.size === 0) return
  const due = Date.now() - PROGRESS_FLUSH_MS
  const rows = []
  for (const [id, p] of deps.progress) {
    if (p.since > due) continue
    rows.push({ id, progress: p.row.progress, updated_at: p.row.updated_at })
    deps.progress.delete(id)
  }
  if (rows.length === 0) return
  saveProgress(sql, rows).catch((err) => { health.report(err); log.warn({ err: String(err) }, 'progress flush failed') })
}, PROGRESS_FLUSH_MS)
progressTimer.unref()

main.tell('ready', {})
