import { createApp, type App } from './app.js'
import { loadConfig } from './config.js'

/**
 * Boots the service (`npm start`); SIGTERM/SIGINT drain and exit 0. The handlers are installed
 * before the boot: a front-end thread can serve (health answers) before createApp returns, and a
 * signal then must still drain rather than kill the process.
 */
const config = loadConfig()
let app: App | null = null
let stopping: NodeJS.Signals | null = null

function stop (sig: NodeJS.Signals): void {
  if (app === null) return // still booting: stopped as soon as the boot ends
  app.services.log.info({ signal: sig }, 'draining and shutting down')
  const force = setTimeout(() => { process.stderr.write('shutdown took too long; exiting\n'); process.exit(1) }, 30_000)
  force.unref()
  app.close().then(() => process.exit(0), (err) => { process.stderr.write(`shutdown failed: ${err}\n`); process.exit(1) })
}

for (const sig of ['SIGTERM', 'SIGINT'] as const) {
  process.on(sig, () => {
    if (stopping !== null) return
    stopping = sig
    stop(sig)
  })
}

app = await createApp(config)
process.stdout.write(`genjobs listening on ${config.publicBaseUrl} (port ${app.port})\n`)
if (stopping !== null) stop(stopping)
