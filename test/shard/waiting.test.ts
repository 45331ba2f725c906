// The shard's waiting index (docs/architecture.md "Waiting jobs"): records by id, a min-heap of
// due times behind one timer, at most `maxActive` woken at a time, callbacks find jobs by id.
import t from 'tap'
import { execFile } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { WaitingJobs, type WaitingJob } from '../../src/shard/waiting.js'

function waitFor (cond: () => boolean, ms = 5000): Promise<void> {
  return new Promise((resolve, reject) => {
    const end = Date.now() + ms
    const check = (): void => { if (cond()) resolve(); else if (Date.now() > end) reject(new Error('timed out')); else setTimeout(check, 5) }
    check()
  })
}

t.test('due records wake in due order, in batches, never more than maxActive at once', async (t) => {
  const woken: WaitingJob[][] = []
  const w = new WaitingJobs(due => { woken.push(due) }, 3)
  const now = Date.now()
  const order = [50, 10, 40, 20, 30, 60, 0]
  order.forEach((d, i) => w.add(`job_${d}`, i, null, now + d, 0, null))
  t.equal(w.size, 7)
  await waitFor(() => woken.flat().length >= 3)
  t.ok(woken.flat().length === 3, 'three woken, the rest wait for room')
  const first = woken.flat().map(r => r.id)
  t.same(first, ['job_0', 'job_10', 'job_20'], 'earliest first')
  for (const r of woken.flat()) w.woken(r)
  w.settled(); w.settled(); w.settled()
  await waitFor(() => woken.flat().length === 6)
  t.same(woken.flat().slice(3).map(r => r.id), ['job_30', 'job_40', 'job_50'])
  t.equal(w.active, 3)
  w.close()
})

t.test('a callback claims its record by id; one being woken keeps the state for its wake-up', async (t) => {
  const woken: WaitingJob[] = []
  const w = new WaitingJobs(due => { woken.push(...due) }, 10)
  w.add('job_a', 1, 7, Date.now() + 60_000, 2, 'running 40')
  w.add('job_b', 1, null, Date.now(), 0, null)
  const a = w.claim('job_a')
  t.equal(a?.polls, 2)
  t.equal(a?.label, 'running 40')
  t.equal(a?.key, 7)
  t.ok(w.has('job_a'), 'still known by id while its row is read')
  t.equal(w.claim('job_a', { state: 'running' }), null, 'a second callback meanwhile does not claim it again')
  t.same(a?.pushed, { state: 'running' }, 'its state rides along with the first')
  w.woken(a!)
  t.notOk(w.has('job_a'), 'left the index once it runs')
  t.equal(w.claim('job_unknown'), null)
  await waitFor(() => woken.length === 1)
  t.equal(w.claim('job_b', { state: 'succeeded' }), null, 'being woken: not claimed')
  t.same(woken[0].pushed, { state: 'succeeded' }, 'the state rides along')
  w.retry(woken, 10)
  t.ok(w.has('job_b'), 'put back after a failed read')
  await waitFor(() => woken.length === 2)
  t.equal(woken[1].id, 'job_b')
  w.close()
})

t.test('an unclaimed record waits again: at its own due time, or at the one given', async (t) => {
  const woken: string[] = []
  const w = new WaitingJobs(due => { for (const r of due) { woken.push(r.id); w.woken(r); w.settled() } }, 10)
  w.add('job_far', 1, null, Date.now() + 60_000, 0, null)
  w.add('job_near', 1, null, Date.now() + 60_000, 0, null)
  const far = w.claim('job_far')!
  const near = w.claim('job_near')!
  w.unclaim(far)
  w.unclaim(near, Date.now() + 20)
  t.equal(w.size, 2)
  await waitFor(() => woken.length === 1)
  t.same(woken, ['job_near'], 'the one due soon woke; the other keeps its minute')
  t.ok(w.has('job_far'))
  t.equal(w.claim('job_far')?.id, 'job_far', 'and can be claimed again')
  w.close()
})

t.test('an earlier record re-arms the one timer; re-adding a job moves it', async (t) => {
  const woken: string[] = []
  const w = new WaitingJobs(due => { for (const r of due) { woken.push(r.id); w.woken(r); w.settled() } }, 10)
  w.add('late', 1, null, Date.now() + 60_000, 0, null)
  w.add('soon', 1, null, Date.now() + 20, 0, null)
  await waitFor(() => woken.length === 1)
  t.same(woken, ['soon'])
  w.add('late', 1, null, Date.now() + 10, 1, null)
  await waitFor(() => woken.length === 2)
  t.same(woken, ['soon', 'late'])
  t.equal(w.size, 0)
  w.close()
})

// Memory per waiting job (docs/architecture.md "Waiting jobs"), measured in a child process
// run with --expose-gc (test/fixtures/waiting-heap.ts).
function heapPerJob (count: number, labels: 'labels' | 'none'): Promise<number> {
  const child = fileURLToPath(new URL('../fixtures/waiting-heap.js', import.meta.url))
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--expose-gc', child, String(count), labels], (err, stdout) => {
      if (err) reject(err); else resolve(JSON.parse(stdout).perJob)
    })
  })
}

t.test('records share their upstream labels: a label costs a waiting job no string of its own', async (t) => {
  const [labelled, bare] = await Promise.all([heapPerJob(50_000, 'labels'), heapPerJob(50_000, 'none')])
  t.comment(`heap per waiting job: ${labelled.toFixed(0)} B with labels, ${bare.toFixed(0)} B without`)
  // A label string of its own ("running 40") would be 24-32 B a job.
  t.ok(labelled - bare <= 8, `a label adds ${(labelled - bare).toFixed(1)} B a job`)
  t.ok(labelled <= 300, `${labelled.toFixed(0)} B a waiting job (record, id, index entry)`)
})
