import { createApp } from './app.js'
import { loadConfig } from './config.js'

/** Boots the service (`npm start`); SIGTERM/SIGINT drain and exit 0. */
const config = loadConfig()
const app = await createApp(config)
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
