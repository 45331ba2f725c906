// Login throttling: 429 RATE_LIMIT_EXCEEDED with Retry-After after 10
// failures per account or 50 per client address within 15 min, whether or not the account
// exists; failed and throttled attempts are audited in login_attempts; with REDIS_URL the
// counts hold across nodes.
import t from 'tap'
import { freshDatabase } from '../helpers/db.js'
import { createUser, startServer, type TestServer } from '../helpers/server.js'
import { dbOf } from '../helpers/jobs.js'
import { accountLockS, LOGIN_ACCOUNT_FAILURES, LOGIN_ADDRESS_FAILURES, MemoryLoginThrottle } from '../../src/http/login-throttle.js'
import { settled } from '../helpers/wait.js'

const login = (s: TestServer, email: string, password: string) => s.req('POST', '/v1/auth/login', { body: { email, password } })

t.test('10 wrong passwords lock the account (even the right one gets 429), unknown emails alike; audited', async (t) => {
  const s = await startServer(t)
  const u = await createUser(s, { withKey: false })
  for (let i = 0; i < LOGIN_ACCOUNT_FAILURES; i++) t.equal((await login(s, u.email, 'wrong password')).status, 401, `failure ${i + 1}: 401`)
  const locked = await login(s, u.email, u.password)
  t.equal(locked.status, 429, 'the right password is refused while locked')
  t.match(locked.body, { error: true, code: 'RATE_LIMIT_EXCEEDED', message: /failed logins/ })
  const ra = Number(locked.headers.get('retry-after'))
  t.ok(ra >= 55 && ra <= 60, `Retry-After ${ra} s (1 min lock)`)
  t.equal((await login(s, u.email.toUpperCase(), u.password)).status, 429, 'the email is matched case-insensitively')

  // The same for an email no account has: the answers do not reveal which emails exist.
  const ghost = `nobody_${Date.now()}@example.com`
  for (let i = 0; i < LOGIN_ACCOUNT_FAILURES; i++) t.equal((await login(s, ghost, 'wrong password')).status, 401)
  t.equal((await login(s, ghost, 'wrong password')).status, 429, 'unknown email: 429 too')

  const other = await createUser(s, { withKey: false })
  t.equal((await login(s, other.email, other.password)).status, 200, 'other accounts are unaffected')

  const sql = dbOf(t, s)
  // The audit insert does not delay answers: wait for all 23 of these two emails' rows.
  const audited = () => sql<{ email: string; outcome: string; account_id: number | null; n: number }[]>`
    SELECT email, outcome, account_id, count(*)::int AS n FROM login_attempts GROUP BY 1, 2, 3 ORDER BY 1, 2`
  const rows = await settled(audited, rs => rs.filter(r => r.email === u.email.toLowerCase() || r.email === ghost).reduce((n, r) => n + r.n, 0) >= 23)
  t.same(rows.filter(r => r.email === u.email.toLowerCase()), [
    { email: u.email.toLowerCase(), outcome: 'failure', account_id: u.id, n: 10 },
    { email: u.email.toLowerCase(), outcome: 'throttled', account_id: null, n: 2 },
  ], 'failures and throttled attempts audited')
  t.same(rows.filter(r => r.email === ghost).map(r => [r.outcome, r.n]), [['failure', 10], ['throttled', 1]])
})

t.test('50 failures from one address lock every email from it', async (t) => {
  const s = await startServer(t)
  const u = await createUser(s, { withKey: false })
  for (let i = 0; i < LOGIN_ADDRESS_FAILURES; i++) {
    const r = await login(s, `spray_${i}_${Date.now()}@example.com`, 'wrong password')
    if (r.status !== 401) { t.fail(`attempt ${i + 1}: ${r.status}`); break }
  }
  const r = await login(s, u.email, u.password)
  t.equal(r.status, 429, 'a correct login from that address waits')
  t.ok(Number(r.headers.get('retry-after')) > 800, 'until the 15 min window ends')
})

t.test('backoff doubles per further failure up to 15 min; the in-process map is bounded', async (t) => {
  const now = 1_000_000_000
  t.equal(accountLockS(9, now, now), 0)
  t.equal(accountLockS(10, now, now), 60)
  t.equal(accountLockS(11, now, now), 120)
  t.equal(accountLockS(14, now, now), 900, 'capped at 15 min')
  t.equal(accountLockS(10, now, now + 61_000), 0, 'lock over')
  const m = new MemoryLoginThrottle()
  for (let i = 0; i < 210_000; i++) await m.failed(`e${i}`, '1.2.3.4', now)
  t.ok(m.bytes <= 16 * 1024 * 1024 && m.size < 210_000, `entries ${m.size}, ${m.bytes} bytes <= 16 MB default`)
})

t.test('with REDIS_URL the counts are shared: failures on node A lock the account on node B', { skip: process.env.REDIS_URL_TEST ? false : 'REDIS_URL_TEST unset' }, async (t) => {
  const db = await freshDatabase(t)
  const env = { DATABASE_URL: db, REDIS_URL: process.env.REDIS_URL_TEST!, REDIS_PREFIX: `gjt_login_${process.pid}_${Date.now()}` }
  const a = await startServer(t, env)
  const b = await startServer(t, env)
  const u = await createUser(a, { withKey: false })
  for (let i = 0; i < LOGIN_ACCOUNT_FAILURES; i++) t.equal((await login(i % 2 ? a : b, u.email, 'wrong password')).status, 401)
  const r = await login(b, u.email, u.password)
  t.equal(r.status, 429, 'node B refuses after failures spread over both nodes')
  t.ok(Number(r.headers.get('retry-after')) >= 55)
})
