/**
 * The thread crossing, measured standalone:
 *   npm run build && node dist/bench/crossing.js [--posts N]
 *
 * Three ways to post a batch between the main thread and a worker:
 *   view      (the old port.ts) msgpackr pack -> a view into msgpackr's shared buffer, posted as is:
 *             structured clone copies the whole underlying ArrayBuffer (grows to the largest
 *             message ever packed, and never shrinks)
 *   exact     msgpackr pack, copied into an ArrayBuffer of exactly its size, transferred
 *   clone     the plain object, structured-cloned by postMessage
 * Each is measured for small posts (a typical job.create), for small posts after one 20 KB
 * message (a 10,000-character prompt), and for large posts. Figures: wall ms for N posts to
 * be received and decoded by the worker, and process CPU ms (both threads) per 1000 posts.
 */
import { Worker, isMainThread, parentPort } from 'node:worker_threads'
import { Packr } from 'msgpackr'

type Mode = 'view' | 'exact' | 'clone'

const packr = new Packr({ useRecords: false, moreTypes: false })

if (!isMainThread) {
  // The receiving side decodes as the real one does, and answers when it has seen `n`.
  let seen = 0
  let want = 0
  parentPort!.on('message', (m: unknown) => {
    if (typeof m === 'object' && m !== null && 'expect' in m) { want = (m as { expect: number }).expect; seen = 0; return }
    const b = m instanceof ArrayBuffer ? packr.unpack(new Uint8Array(m)) : m instanceof Uint8Array ? packr.unpack(m) : m
    if ((b as { req?: unknown[] }).req === undefined) throw new Error('bad batch')
    if (++seen === want) parentPort!.postMessage('done')
  })
} else {
  const arg = process.argv.indexOf('--posts')
  const N = arg > 0 ? Number(process.argv[arg + 1]) : 5000

  const small = (i: number) => ({
    req: [{ id: i, msg: { type: 'job.create', accountId: 42, keyId: 7, maxConcurrent: 10, idempotencyKey: `k${i}`, fingerprint: 'x'.repeat(43),
      spec: { type: 'image', model: 'nano-banana', credits: 10, estimated_seconds: 15, request: { kind: 'image', model: 'nano-banana', prompt: 'a small red fox in the snow', resolution: '1K', webhook_url: null } } } }],
  })
  const bigPrompt = '提示'.repeat(5000) // 10,000 characters, ~30 KB of UTF-8
  const large = (i: number) => {
    const b = small(i)
    b.req[0].msg.spec.request.prompt = bigPrompt
    return b
  }

  function post (w: Worker, mode: Mode, b: unknown): void {
    if (mode === 'clone') { w.postMessage(b); return }
    const packed = packr.pack(b)
    if (mode === 'view') { w.postMessage(packed); return }
    const ab = new ArrayBuffer(packed.length)
    new Uint8Array(ab).set(packed)
    w.postMessage(ab, [ab])
  }

  async function run (mode: Mode, make: (i: number) => unknown, warm?: () => unknown): Promise<{ ms: number; cpuMsPer1000: number }> {
    const w = new Worker(new URL(import.meta.url))
    // A fresh Packr per run: its shared buffer starts small, as in a fresh process.
    const own = new Packr({ useRecords: false, moreTypes: false })
    const realPack = packr.pack.bind(packr)
    packr.pack = own.pack.bind(own) as typeof packr.pack
    try {
      const done = () => new Promise<void>(resolve => w.once('message', () => resolve()))
      if (warm) { w.postMessage({ expect: 1 }); const d = done(); post(w, mode, warm()); await d }
      w.postMessage({ expect: N })
      const d = done()
      const c0 = process.cpuUsage()
      const t0 = performance.now()
      for (let i = 0; i < N; i++) post(w, mode, make(i))
      await d
      const ms = performance.now() - t0
      const c = process.cpuUsage(c0)
      return { ms, cpuMsPer1000: (c.user + c.system) / 1000 / N * 1000 }
    } finally {
      packr.pack = realPack
      await w.terminate()
    }
  }

  const cases: Array<[string, (i: number) => unknown, (() => unknown) | undefined]> = [
    ['small posts, fresh buffer', small, undefined],
    ['small posts after one 30 KB post', small, () => large(0)],
    ['large posts (10,000-char prompt)', large, undefined],
  ]
  console.log(`${N} posts per cell; wall ms (process CPU ms per 1000 posts, both threads)`)
  console.log(['case'.padEnd(36), 'view'.padStart(18), 'exact'.padStart(18), 'clone'.padStart(18)].join(''))
  for (const [name, make, warm] of cases) {
    const cells: string[] = []
    for (const mode of ['view', 'exact', 'clone'] as Mode[]) {
      await run(mode, make, warm) // warm-up
      const r = await run(mode, make, warm)
      cells.push(`${r.ms.toFixed(0)} (${r.cpuMsPer1000.toFixed(0)})`.padStart(18))
    }
    console.log(name.padEnd(36) + cells.join(''))
  }
}
