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

t.test('SHARDS and FRONTENDS: one front end, and a shard for each core it leaves, by default', async (t) => {
  const cores = availableParallelism()
  const c = loadConfig({})
  t.equal(c.frontends, 1)
  t.equal(c.shards, Math.max(1, cores - 1))
  t.equal(loadConfig({ FRONTENDS: '2' }).shards, Math.max(1, cores - 2), 'each front-end thread takes a core from the shards')
  t.equal(loadConfig({ FRONTENDS: String(cores + 4) }).shards, 1, 'never fewer than one shard')
  t.equal(loadConfig({ SHARDS: '3', FRONTENDS: '2' }).shards, 3, 'SHARDS as set wins')
  t.throws(() => loadConfig({ FRONTENDS: '0' }), /FRONTENDS/)
  t.throws(() => loadConfig({ SHARDS: '0' }), /SHARDS/)
})
