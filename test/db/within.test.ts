// within (src/db/connect.ts): the bound on every wait of an actor (its own reads, group commits).
// A lost operation costs one bounded wait, answered as "database unavailable" (503).
import t from 'tap'
import { isDbUnavailable, within } from '../../src/db/connect.js'

t.test('a settled operation passes through, value or error', async (t) => {
  t.equal(await within(Promise.resolve(7), 50), 7)
  const bad = new Error('syntax')
  await t.rejects(within(Promise.reject(bad), 50), bad)
})

t.test('an operation that never settles fails as DB_STALLED, a database-unavailable error', async (t) => {
  const err = await within(new Promise(() => {}), 20, 'read').catch((e: Error & { code?: string }) => e)
  t.equal((err as { code?: string }).code, 'DB_STALLED')
  t.match((err as Error).message, /read not settled within 20 ms/)
  t.ok(isDbUnavailable(err), 'answered 503 with Retry-After')
})
