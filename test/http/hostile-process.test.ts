// Hostile input against the real process (`node dist/src/main.js`), one and two front-end
// threads (docs/operations.md "Hostile input"): oversized provider callbacks, with and without
// Content-Length, never stop it; it answers health afterwards and exits cleanly on SIGTERM.
import t from 'tap'
import { startService } from '../../bench/lib/children.js'
import { CALLBACK_ENV, sendOversized } from '../../bench/lib/hostile.js'
import { freshDatabase } from '../helpers/db.js'


for (const frontends of ['1', '2']) {
  t.test(`FRONTENDS=${frontends}: 20 oversized callbacks per provider, with and without Content-Length, and the same process answers health`, async (t) => {
    const svc = await startService({ databaseUrl: await freshDatabase(t), env: { ...CALLBACK_ENV, FRONTENDS: frontends, SHARDS: '1' } })
    let stopped = false
    t.teardown(async () => { if (!stopped) await svc.stop() })
    const seen = new Map<string, number>()
    for (const provider of ['fal', 'replicate', 'kie']) {
      for (const chunked of [false, true]) {
        for (let i = 0; i < 20; i++) {
          const r = await sendOversized(svc.url, 'POST', `/v1/providers/${provider}/callback`, { bytes: 2 * 1024 * 1024 + i * 4096, chunked })
          const k = `${r.status}`
          seen.set(k, (seen.get(k) ?? 0) + 1)
          if (r.status === 413) t.match(JSON.parse(r.body), { error: true, code: 'PAYLOAD_TOO_LARGE', details: { max_bytes: 256 * 1024 } })
        }
      }
      const h = await fetch(`${svc.url}/v1/health`)
      t.equal(h.status, 200, `${provider}: health answers after its 40 oversized callbacks`)
    }
    t.comment(`answers: ${JSON.stringify(Object.fromEntries(seen))}`)
    // Each is refused (413 while the address has refusals left in its minute, 429 after), never dropped.
    t.equal((seen.get('413') ?? 0) + (seen.get('429') ?? 0), 120, 'every oversized callback answered 413 or 429')
    t.ok((seen.get('413') ?? 0) >= 60, 'the first 60 were read as far as the cap and answered 413')
    t.notMatch(svc.stderr(), /uncaught exception|must not be accessed/, 'nothing escaped to the process')
    stopped = true
    t.equal(await svc.stop(), 0, 'and it still stops cleanly (exit 0 on SIGTERM)')
  })
}
