// The per-provider circuit breaker of docs/architecture.md "Providers and media" (pure: time is passed in).
import t from 'tap'
import { CircuitBreaker } from '../../src/providers/circuit-breaker.js'

t.test('opens after `threshold` consecutive failures; a success in between resets the count', async (t) => {
  const b = new CircuitBreaker(3, 1000)
  b.failure(0); b.failure(0); b.success()
  b.failure(0); b.failure(0)
  t.ok(b.allow(0), 'two consecutive failures: still closed')
  b.failure(0)
  t.notOk(b.allow(1), 'the third opens it')
  t.notOk(b.allow(999), 'for the whole cool-down')
})

t.test('after the cool-down one trial goes through (half-open); its success closes, its failure reopens', async (t) => {
  const b = new CircuitBreaker(2, 1000)
  b.failure(0); b.failure(0)
  t.ok(b.allow(1000), 'trial after the cool-down')
  t.notOk(b.allow(1001), 'only one trial at a time')
  b.failure(1002)
  t.notOk(b.allow(1500), 'the failed trial reopens it')
  t.ok(b.allow(2002), 'next trial a cool-down later')
  b.success()
  t.ok(b.allow(2003))
  t.ok(b.allow(2003), 'closed again: every submission allowed')
})

t.test('a trial that never reports (job queued, or submission timed out) does not keep the breaker open forever', async (t) => {
  const b = new CircuitBreaker(1, 1000)
  b.failure(0)
  t.ok(b.allow(1000), 'trial let through; it never calls success() or failure()')
  t.notOk(b.allow(1500), 'blocked while the trial may still answer')
  t.ok(b.allow(2000), 'another trial once a cool-down has passed')
  b.success()
  t.ok(b.allow(2001))
})
