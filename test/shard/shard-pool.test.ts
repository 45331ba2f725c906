// Shard workers (docs/architecture.md "Threads") and group commit (section 3): a crashed worker fails its
// pending asks with INTERNAL_ERROR and is restarted; concurrent credits are batched into few
// transactions and keep the ledger invariant credits = sum(credit_entries.delta).
import t from 'tap'
import { ApiError } from '../../src/errors.js'
import { GroupCommit } from '../../src/shard/group-commit.js'
import { SHARD_YOUNG_GENERATION_MB, ShardPool } from '../../src/shard/shard-pool.js'
import { connect, type Sql } from '../../src/db/connect.js'
import { applyCredit } from '../../src/db/accounts.js'
import { migrate } from '../../src/db/migrate.js'
import { freshDatabase } from '../helpers/db.js'
import { createUser, startServer } from '../helpers/server.js'
import { sleep, waitFor } from '../helpers/wait.js'


async function ledgerMismatches (sql: Sql): Promise<any[]> {
  return sql<any[]>`
    SELECT a.id, a.credits, coalesce(sum(e.delta), 0)::bigint AS sum
    FROM accounts a LEFT JOIN credit_entries e ON e.account_id = a.id
    GROUP BY a.id HAVING a.credits <> coalesce(sum(e.delta), 0)`
}

async function until (cond: () => boolean, ms = 5000): Promise<boolean> {
  try { await waitFor(cond, { what: 'condition', timeoutMs: ms, everyMs: 10 }); return true } catch { return false }
}

t.test('through the running service', async (t) => {
  const s = await startServer(t, { SHARDS: '2' })
  const shards = s.app.services.shards
  const sql = s.app.services.sql

  /** Accounts on shard `k` (id mod 2). */
  async function accountsOn (k: number, n: number) {
    const out: Array<{ id: number; key: string }> = []
    while (out.length < n) {
      const u = await createUser(s)
      if (shards.shardOf(u.id) === k) out.push({ id: u.id, key: u.key })
    }
    return out
  }

  t.test('crash(0) with asks pending: they reject with INTERNAL_ERROR, the worker restarts, later asks succeed', async (t) => {
    const [a] = await accountsOn(0, 1)
    const [b] = await accountsOn(1, 1)
    t.equal((await shards.ask(a.id, { type: 'account.get', accountId: a.id })).credits, 200)
    const restarts = shards.restarts
    const onZero = Array.from({ length: 30 }, (_, i) => i % 3 === 0
      ? shards.ask(a.id, { type: 'account.credit', accountId: a.id, credits: 1, kind: 'grant' })
      : shards.ask(a.id, { type: 'account.get', accountId: a.id }))
    const onOne = Array.from({ length: 10 }, () => shards.ask(b.id, { type: 'account.get', accountId: b.id }))
    const crashed = shards.crash(0)
    const settled = await Promise.allSettled(onZero)
    const rejected = settled.filter(r => r.status === 'rejected') as PromiseRejectedResult[]
    t.equal(rejected.length, 30, 'every ask pending on the dead shard failed')
    for (const r of rejected) {
      t.ok(r.reason instanceof ApiError, 'an ApiError')
      t.equal(r.reason.code, 'INTERNAL_ERROR')
      t.equal(r.reason.status, 500)
    }
    const others = await Promise.allSettled(onOne)
    t.ok(others.every(r => r.status === 'fulfilled'), 'the other shard is untouched')
    await crashed
    t.ok(await until(() => shards.restarts === restarts + 1), 'restarts incremented')

    const v = await shards.ask(a.id, { type: 'account.get', accountId: a.id })
    t.equal(v.id, a.id, 'the restarted shard answers')
    const [row] = await sql<any[]>`SELECT credits FROM accounts WHERE id = ${a.id}`
    t.equal(v.credits, row.credits, 'its actor recovered the balance from PostgreSQL')
    const c = await shards.ask(a.id, { type: 'account.credit', accountId: a.id, credits: 5, kind: 'grant' })
    t.equal(c.credits, row.credits + 5, 'and writes again')
    const me = await s.req('GET', '/v1/auth/me', { key: a.key })
    t.equal(me.status, 200, 'HTTP requests for that account work again')
    t.equal(me.body.credits, row.credits + 5)
    t.same(await ledgerMismatches(sql), [])
  })

  t.test('every shard runs with the larger young generation, the one restarted above too', async (t) => {
    t.ok(shards instanceof ShardPool, 'the main thread holds the pool')
    t.ok(shards.restarts >= 1, 'shard 0 was restarted')
    for (let k = 0; k < shards.size; k++) {
      t.equal((shards as ShardPool).resourceLimits(k).maxYoungGenerationSizeMb, SHARD_YOUNG_GENERATION_MB, `shard ${k}`)
    }
  })

  t.test('crash while credits are committing: acknowledged credits are durable, the invariant holds', async (t) => {
    const accts = await accountsOn(0, 4)
    const before = new Map<number, number>()
    for (const a of accts) before.set(a.id, (await sql<any[]>`SELECT credits FROM accounts WHERE id = ${a.id}`)[0].credits)
    const acked = new Map<number, number>(accts.map(a => [a.id, 0]))
    let firstAck!: () => void
    const gotOne = new Promise<void>(resolve => { firstAck = resolve })
    const asks = Array.from({ length: 120 }, (_, i) => {
      const a = accts[i % accts.length]
      return shards.ask(a.id, { type: 'account.credit', accountId: a.id, credits: 1 + (i % 5), kind: 'grant' })
        .then(() => { acked.set(a.id, acked.get(a.id)! + 1 + (i % 5)); firstAck() })
    })
    await Promise.race([gotOne, sleep(5000)])
    const restarts = shards.restarts
    await shards.crash(0)
    const settled = await Promise.allSettled(asks)
    const failed = settled.filter(r => r.status === 'rejected') as PromiseRejectedResult[]
    t.ok(settled.length - failed.length >= 1, `${settled.length - failed.length} acknowledged before the crash`)
    for (const f of failed) t.equal(f.reason?.code, 'INTERNAL_ERROR')
    t.ok(await until(() => shards.restarts === restarts + 1), 'restarted')
    t.same(await ledgerMismatches(sql), [], 'no half-applied credit')
    for (const a of accts) {
      const [row] = await sql<any[]>`SELECT credits FROM accounts WHERE id = ${a.id}`
      t.ok(row.credits >= before.get(a.id)! + acked.get(a.id)!, `account ${a.id}: every acknowledged credit is committed`)
      const v = await shards.ask(a.id, { type: 'account.get', accountId: a.id })
      t.equal(v.credits, row.credits, 'the new actor sees what PostgreSQL has')
    }
  })

  t.test('200 concurrent account.credit asks on 20 accounts all commit, batched, invariant kept', async (t) => {
    const accts = [...await accountsOn(0, 10), ...await accountsOn(1, 10)]
    const expected = new Map<number, number>()
    for (const a of accts) expected.set(a.id, (await sql<any[]>`SELECT credits FROM accounts WHERE id = ${a.id}`)[0].credits)
    const [{ mark }] = await sql<any[]>`SELECT coalesce(max(id), 0)::bigint AS mark FROM credit_entries`
    const asks = Array.from({ length: 200 }, (_, i) => {
      const a = accts[i % accts.length]
      const credits = 1 + (i % 9)
      expected.set(a.id, expected.get(a.id)! + credits)
      return shards.ask(a.id, { type: 'account.credit', accountId: a.id, credits, kind: i % 4 === 0 ? 'purchase' : 'grant' })
    })
    const results = await Promise.all(asks)
    t.equal(results.length, 200, 'all acknowledged')
    for (const a of accts) {
      const [row] = await sql<any[]>`SELECT credits FROM accounts WHERE id = ${a.id}`
      t.equal(row.credits, expected.get(a.id), `account ${a.id}`)
      t.equal((await shards.ask(a.id, { type: 'account.get', accountId: a.id })).credits, expected.get(a.id), 'actor agrees')
    }
    t.same(await ledgerMismatches(sql), [], 'invariant')
    // Rows written by one transaction share its xmin: fewer transactions than entries = batched.
    const [{ entries, txs }] = await sql<any[]>`
      SELECT count(*)::int AS entries, count(DISTINCT xmin::text)::int AS txs FROM credit_entries WHERE id > ${mark}`
    t.equal(entries, 200)
    t.ok(txs < entries, `${entries} entries in ${txs} transactions`)
    const [{ n }] = await sql<any[]>`SELECT count(*)::int AS n FROM purchases p JOIN credit_entries e ON e.account_id = p.account_id AND e.kind = 'purchase' AND e.id > ${mark}`
    t.ok(n >= 50, 'purchases recorded with their entries')
  })
})

t.test('GroupCommit on its own', async (t) => {
  const url = await freshDatabase(t)
  const sql = connect(url, { max: 4 })
  t.teardown(() => sql.end({ timeout: 5 }))
  await migrate(sql)

  async function account (credits = 0): Promise<number> {
    const [a] = await sql<any[]>`INSERT INTO accounts (email, password_hash, credits) VALUES (${`gc${Math.random()}@x.io`}, 'x', ${credits}) RETURNING id`
    if (credits > 0) await sql`INSERT INTO credit_entries (account_id, delta, kind) VALUES (${a.id}, ${credits}, 'grant')`
    return a.id
  }
  const credits = async (id: number) => (await sql<any[]>`SELECT credits FROM accounts WHERE id = ${id}`)[0].credits

  t.test('everything queued in one turn commits as one transaction', async (t) => {
    const gc = new GroupCommit(sql)
    const ids = await Promise.all(Array.from({ length: 10 }, () => account()))
    const all = await Promise.all(Array.from({ length: 100 }, (_, i) => gc.run(tx => applyCredit(tx, ids[i % 10], 1, 'grant', null, null))))
    t.equal(all.length, 100)
    t.same(gc.stats, { transactions: 1, items: 100, fallbacks: 0, together: 0 })
    for (const id of ids) t.equal(await credits(id), 10)
    t.same(await ledgerMismatches(sql), [])
  })

  t.test('under sustained load batches grow: fewer transactions than items, each caller released after COMMIT', async (t) => {
    const gc = new GroupCommit(sql)
    const id = await account()
    let committedSeen = 0
    const waves: Promise<unknown>[] = []
    for (let w = 0; w < 20; w++) {
      for (let i = 0; i < 10; i++) {
        waves.push(gc.run(tx => applyCredit(tx, id, 1, 'grant', null, null)).then(async (b) => {
          // Released only once durable: a fresh connection already sees at least this balance.
          const [row] = await sql<any[]>`SELECT credits FROM accounts WHERE id = ${id}`
          if (row.credits >= (b as number)) committedSeen++
        }))
      }
      await sleep(1) // time: the waves arrive over separate turns, as requests do
    }
    await Promise.all(waves)
    await gc.idle()
    t.equal(gc.stats.items, 200)
    t.ok(gc.stats.transactions < 200, `${gc.stats.transactions} transactions for 200 items`)
    t.equal(committedSeen, 200, 'no caller saw an uncommitted balance')
    t.equal(await credits(id), 200)
  })

  t.test('one failing item (CHECK violation) rejects alone; the rest of its batch commits', async (t) => {
    const gc = new GroupCommit(sql)
    const ids = await Promise.all(Array.from({ length: 5 }, () => account(100)))
    const victim = await account(100)
    const good = ids.flatMap(id => [1, 2, 3].map(n => gc.run(tx => applyCredit(tx, id, n, 'grant', null, null))))
    const bad = gc.run(tx => tx`UPDATE accounts SET credits = -1 WHERE id = ${victim}`)
    const badKind = gc.run(tx => tx`INSERT INTO credit_entries (account_id, delta, kind) VALUES (${victim}, 1, 'bogus')`)
    const settled = await Promise.allSettled([...good, bad, badKind])
    const goodResults = settled.slice(0, good.length)
    t.ok(goodResults.every(r => r.status === 'fulfilled'), 'every good item resolved')
    t.equal(settled[good.length].status, 'rejected', 'the CHECK violation rejected')
    t.equal((settled[good.length] as PromiseRejectedResult).reason?.code, '23514', 'with PostgreSQL check_violation')
    t.equal(settled[good.length + 1].status, 'rejected', 'the bad kind rejected')
    for (const id of ids) t.equal(await credits(id), 106, `account ${id}: 100 + 1 + 2 + 3, applied once`)
    t.equal(await credits(victim), 100, 'the victim is untouched')
    t.equal(gc.stats.fallbacks, 1, 'the batch fell back to one transaction per item once')
    t.same(await ledgerMismatches(sql), [], 'invariant')
  })

  t.test('a failing sibling never lets a multi-statement item run outside its transaction', async (t) => {
    // applyCredit is two statements (UPDATE then INSERT). When a sibling fails, the second
    // statement must not be sent after the batch rolled back: on a connection back in the pool
    // it would autocommit a ledger entry without its balance change (and the retry would add both).
    for (let round = 0; round < 20; round++) {
      const gc = new GroupCommit(sql)
      const ids = await Promise.all(Array.from({ length: 4 }, () => account(50)))
      const victim = await account(50)
      const items = [
        ...ids.map(id => gc.run(tx => applyCredit(tx, id, 7, 'grant', null, null))),
        gc.run(async tx => { await tx`SELECT 1`; await tx`UPDATE accounts SET credits = -1 WHERE id = ${victim}` }),
        ...ids.map(id => gc.run(async tx => { await tx`SELECT pg_sleep(0.002)`; return applyCredit(tx, id, 3, 'grant', null, null) })),
      ]
      await Promise.allSettled(items)
      await gc.idle()
      await sleep(20) // time: a window in which a stray statement would land (nothing to wait for when none comes)
      const mismatches = await ledgerMismatches(sql)
      if (mismatches.length > 0) { t.same(mismatches, [], `round ${round}: invariant`); return }
      for (const id of ids) t.equal(await credits(id), 60, `round ${round}: account ${id} got 7 + 3 once`)
    }
    t.same(await ledgerMismatches(sql), [], 'invariant after 20 rounds')
  })

  t.test('a sibling still working when another item fails is neither run outside the transaction nor applied twice', async (t) => {
    // The failing item errors at once; the slow one awaits something else (a timer) between its
    // statements. Its UPDATE + INSERT must not reach the connection after the batch's ROLLBACK
    // (the connection is back in the pool: they would autocommit), then be applied again by the retry.
    const gc = new GroupCommit(sql)
    const id = await account(50)
    const victim = await account(50)
    let runs = 0
    const slow = gc.run(async tx => {
      runs++
      await tx`SELECT 1`
      await sleep(30) // time: slow on purpose, so the sibling fails while this item is mid-transaction
      return applyCredit(tx, id, 5, 'grant', null, null)
    })
    const bad = gc.run(tx => tx`UPDATE accounts SET credits = -1 WHERE id = ${victim}`)
    const [a, b] = await Promise.allSettled([slow, bad])
    t.equal(a.status, 'fulfilled', 'the slow item commits')
    t.equal(b.status, 'rejected', 'the bad one fails')
    await gc.idle()
    await sleep(50) // time: a window in which a stray statement after the ROLLBACK would land
    t.equal(await credits(id), 55, 'applied exactly once')
    t.equal((await sql<any[]>`SELECT count(*)::int AS n FROM credit_entries WHERE account_id = ${id}`)[0].n, 2, 'one opening grant + one entry')
    t.same(await ledgerMismatches(sql), [], 'invariant')
    t.ok(runs <= 2, `the slow item ran at most twice: in the failed batch, then alone (${runs})`)
  })

  t.test('a lone failing item rejects without a fallback; idle() waits for everything', async (t) => {
    const gc = new GroupCommit(sql)
    const id = await account(10)
    await t.rejects(gc.run(tx => tx`UPDATE accounts SET credits = -5 WHERE id = ${id}`))
    t.equal(gc.stats.fallbacks, 0)
    const p = gc.run(tx => applyCredit(tx, id, 4, 'grant', null, null))
    await gc.idle()
    t.equal(await p, 14)
    t.equal(await credits(id), 14)
  })
})
