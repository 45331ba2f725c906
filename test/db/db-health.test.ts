// DbHealth (src/db/connect.ts): the per-thread "is PostgreSQL reachable" state that bounds
// callers' waits during an outage. No database: the probe is a function the test controls.
import t from 'tap'
import { DbHealth, isDbUnavailable } from '../../src/db/connect.js'

type Change = { up: boolean; why?: string }

/** A health whose probe answers as `next` says; `changes` yields each up/down transition. */
function harness (t: { teardown: (fn: () => void) => void }) {
  let next: () => Promise<unknown> = () => Promise.resolve()
  let probes = 0
  const seen: Change[] = []
  const waiters: Array<() => void> = []
  const h = new DbHealth(() => { probes++; return next() }, 5, (up, why) => { seen.push({ up, why }); for (const w of waiters.splice(0)) w() }, 5, 40)
  // The health's timers are unref'd (they never hold a process open): this one holds the test's.
  const alive = setInterval(() => {}, 1000)
  t.teardown(() => { h.close(); clearInterval(alive) })
  return {
    h,
    set probe (f: () => Promise<unknown>) { next = f },
    get probes () { return probes },
    seen,
    /** Resolves at the next transition. */
    change: () => new Promise<Change>(resolve => waiters.push(() => resolve(seen[seen.length - 1]))),
    /** Resolves once `n` more probes have started. */
    async probesPast (n: number) { const target = probes + n; while (probes < target) await new Promise(resolve => setImmediate(resolve)) },
  }
}

const refused = () => Promise.reject(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))
const slow = (ms: number) => () => new Promise(resolve => setTimeout(resolve, ms)) // time: a probe slow on purpose

t.test('a probe that fails with an error marks the database down at once; the next answer brings it up', async (t) => {
  const x = harness(t)
  await x.probesPast(2)
  t.notOk(x.h.isDown, 'up while probes answer')
  const down = x.change()
  x.probe = refused
  t.same(await down, { up: false, why: 'probe failed' })
  t.ok(x.h.isDown)
  const up = x.change()
  x.probe = () => Promise.resolve()
  t.same(await up, { up: true, why: undefined })
  t.equal(x.h.stats.outages, 1)
})

t.test('one probe slower than its timeout is not an outage (a starved machine); two in a row are', async (t) => {
  const x = harness(t)
  await x.probesPast(1)
  // Slower than one timeout (40 ms), answered within two: no transition.
  x.probe = slow(60)
  await x.probesPast(1)
  x.probe = () => Promise.resolve()
  await x.probesPast(3)
  t.same(x.seen, [], 'one slow probe: still up')
  t.notOk(x.h.isDown)
  // Unanswered through two timeouts: down.
  const down = x.change()
  x.probe = () => new Promise(() => {})
  t.same(await down, { up: false, why: 'no probe answer within 80 ms' })
})

t.test('report() marks down only for database-unavailable errors, with their code', async (t) => {
  const x = harness(t)
  x.h.report(new Error('syntax error at or near'))
  t.notOk(x.h.isDown, 'a query error is not an outage')
  x.probe = () => new Promise(() => {}) // stays down until the test ends
  x.h.report(Object.assign(new Error('write CONNECTION_CLOSED'), { code: 'CONNECTION_CLOSED' }))
  t.ok(x.h.isDown)
  t.same(x.seen, [{ up: false, why: 'CONNECTION_CLOSED' }])
})

t.test('guard: a pending operation is answered 503 once the database goes down; a settled one passes', async (t) => {
  const x = harness(t)
  t.equal(await x.h.guard(Promise.resolve(3)), 3)
  const pending = x.h.guard(new Promise(() => {}), 5)
  x.probe = () => new Promise(() => {})
  x.h.markDown('test')
  const err = await pending.catch((e: unknown) => e)
  t.ok(isDbUnavailable(err), 'database unavailable (503 with Retry-After)')
  // While down, work that settles within the grace still answers.
  t.equal(await x.h.guard(Promise.resolve('cached'), 50), 'cached')
})
