import { createApp } from './app.js'
import { loadConfig } from './config.js'

/** Boots the service (`npm start`); SIGTERM/SIGINT drain and exit 0. */
const config = loadConfig()
let app: Awaited<ReturnType<typeof createApp>>
try {
  app = await createApp(config)
} catch (err) {
  // A boot mistake (routing file, upstream schema check, ...) is one line and exit 1 (DESIGN.md 7
  // "Health, errors shown to clients, boot"); without this the process-wide error containment
  // logged it and left a half-started process running.
  process.stderr.write(`genjobs: cannot start: ${(err as Error)?.message ?? String(err)}\n`)
  process.exit(1)
}
process.stdout.write(`genjobs listening on ${config.publicBaseUrl} (port ${app.port})\n`)

let stopping = false
for (const sig of ['SIGTERM', 'SIGINT'] as const) {
  process.on(sig, () => {
    if (stopping) return
    stopping = true
    app.services.log.info({ signal: sig }, 'draining and shutting down')
    const force = setTimeout(() => { process.stderr.write('shutdown took too long; exiting\n'); process.exit(1) }, 30_000)
    force.unref()
    app.close().then(() => process.exit(0), (err) => { process.stderr.write(`shutdown failed: ${err}\n`); process.exit(1) })
  })
}
