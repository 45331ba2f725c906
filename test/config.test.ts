// Configuration from the environment (src/config.ts): defaults that follow the machine, and
// bad values refused at startup with the variable's name.
import t from 'tap'
import { availableParallelism } from 'node:os'
import { loadConfig } from '../src/config.js'

t.test('WEBHOOK_WORKERS: half the cores by default (at least 1), or as set', async (t) => {
  t.equal(loadConfig({}).webhookWorkers, Math.max(1, Math.floor(availableParallelism() / 2)))
  t.equal(loadConfig({ WEBHOOK_WORKERS: '3' }).webhookWorkers, 3)
  t.equal(loadConfig({ WEBHOOK_WORKERS: '2.7' }).webhookWorkers, 2, 'a whole number of threads')
  t.throws(() => loadConfig({ WEBHOOK_WORKERS: '0' }), /WEBHOOK_WORKERS must be a number >= 1/)
  t.throws(() => loadConfig({ WEBHOOK_WORKERS: 'many' }), /WEBHOOK_WORKERS/)
})

t.test('SHARDS and FRONTENDS: the cores and 1 by default', async (t) => {
  const c = loadConfig({})
  t.equal(c.shards, Math.max(1, availableParallelism()))
  t.equal(c.frontends, 1)
  t.throws(() => loadConfig({ FRONTENDS: '0' }), /FRONTENDS/)
})
