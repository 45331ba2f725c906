// The simulated provider's results: one stored file per distinct media, shared by
// the jobs that produce it; different media get different files; a failed write is retried.
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import type { ProviderJob, UpstreamState } from '../../src/providers/provider.js'
import { SimulatedProvider } from '../../src/providers/simulated.js'
import { LocalStorage } from '../../src/storage/local.js'

const dir = await mkdtemp(join(tmpdir(), 'gjt-sim-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))
const storage = new LocalStorage(dir, 'http://svc.test')

const job = (id: string, request: Record<string, unknown>): ProviderJob =>
  ({ id, type: 'image', model: 'nano-banana', text: 'a lighthouse', estimatedSeconds: 15, request })

/** Submits and polls until the job leaves queued/running (SIM_SPEED 100000: 1 ms jobs). */
async function finish (p: SimulatedProvider, j: ProviderJob): Promise<UpstreamState> {
  const h = await p.submit({ jobId: j.id, model: 'simulated', input: {}, callbackUrl: null }, j)
  for (;;) {
    const st = await p.status(h, j)
    if (st.state !== 'queued' && st.state !== 'running') return st
    await new Promise(resolve => setImmediate(resolve))
  }
}

t.test('jobs with the same media share one stored result; other media get their own', async (t) => {
  const p = new SimulatedProvider(storage, 100_000)
  const a = await finish(p, job('job_a', { aspect_ratio: '1:1' }))
  const b = await finish(p, job('job_b', { aspect_ratio: '1:1' }))
  const c = await finish(p, job('job_c', { aspect_ratio: '16:9', output_format: 'jpeg' }))
  if (a.state !== 'succeeded' || b.state !== 'succeeded' || c.state !== 'succeeded') throw new Error('not succeeded')
  t.match(a.outputs[0], /^http:\/\/svc\.test\/files\/results\/sim\/[0-9a-f]{32}\.png$/)
  t.equal(b.outputs[0], a.outputs[0], 'the same media: the same file')
  t.match(c.outputs[0], /\/results\/sim\/[0-9a-f]{32}\.jpg$/)
  t.not(c.outputs[0], a.outputs[0])
  const files = (await readdir(join(dir, 'results/sim'))).filter(f => !f.endsWith('.meta')).sort()
  t.equal(files.length, 2, 'two files for three jobs')
  const key = a.outputs[0].slice('http://svc.test/files/'.length)
  const head = await storage.head(key)
  t.equal(head?.contentType, 'image/png')
  const bytes = Buffer.concat(await (await storage.read(key)).toArray())
  t.same(bytes.subarray(1, 4).toString('latin1'), 'PNG', 'a real PNG')
  // Another process (a restart) finds the file in place and answers the same URL.
  const q = new SimulatedProvider(storage, 100_000)
  const d = await finish(q, job('job_d', { aspect_ratio: '1:1' }))
  t.same(d, a)
})

t.test('a failed write is not remembered: the next poll writes the file', async (t) => {
  let fail = true
  const flaky = Object.create(storage) as LocalStorage
  flaky.put = async (...args: Parameters<LocalStorage['put']>) => {
    if (fail) { fail = false; throw new Error('disk full') }
    return storage.put(...args)
  }
  const p = new SimulatedProvider(flaky, 100_000)
  const j = job('job_e', { aspect_ratio: '2:3' })
  await t.rejects(finish(p, j), /disk full/)
  const st = await finish(p, j)
  t.equal(st.state, 'succeeded')
  if (st.state === 'succeeded') t.ok(await storage.head(st.outputs[0].slice('http://svc.test/files/'.length)), 'stored on the retry')
})
