// ManagedWorker (src/threads/worker-lifecycle.ts): the young generation a pool asks for reaches
// its thread, and a restarted thread gets it again; without it the thread keeps V8's default.
import t from 'tap'
import { ManagedWorker, type WorkerSide } from '../../src/threads/worker-lifecycle.js'
import { SHARD_YOUNG_GENERATION_MB } from '../../src/shard/shard-pool.js'
import type { Side } from '../../src/threads/channel.js'

// Any worker script of the service that tells `ready` will do: the file writer is the smallest.
const url = new URL('../../src/storage/file-writer-worker.js', import.meta.url)

function managed (youngGenerationMb?: number): ManagedWorker<Side, WorkerSide> {
  return new ManagedWorker<Side, WorkerSide>({ url, data: () => null, name: 'test worker', handlers: {}, youngGenerationMb })
}

t.test('youngGenerationMb sets the thread\'s young generation, also after a restart', async (t) => {
  const w = managed(SHARD_YOUNG_GENERATION_MB)
  t.teardown(() => w.close())
  await w.ready
  t.equal(w.worker.resourceLimits?.maxYoungGenerationSizeMb, SHARD_YOUNG_GENERATION_MB)
  const first = w.worker
  await w.crash()
  await w.ready
  t.not(w.worker, first, 'a new thread')
  t.equal(w.restarts, 1)
  t.equal(w.worker.resourceLimits?.maxYoungGenerationSizeMb, SHARD_YOUNG_GENERATION_MB)
})

t.test('without it the thread keeps V8\'s default, smaller than the shards\'', async (t) => {
  const w = managed()
  t.teardown(() => w.close())
  await w.ready
  const mb = w.worker.resourceLimits?.maxYoungGenerationSizeMb
  t.type(mb, 'number')
  t.ok(mb! < SHARD_YOUNG_GENERATION_MB, `default ${mb} MB`)
})
