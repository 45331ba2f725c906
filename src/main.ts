import { createApp, type App } from './app.js'
import { ConfigError, loadConfig, type Config } from './config.js'

/**
 * Boots the service (`npm start`, or `node dist/src/main.js` under a supervisor;
 * docs/operations.md "Running in production"). Exit codes: 0 after a drain on SIGTERM/SIGINT, 1 on a
 * configuration mistake (one line on stderr, nothing started), a failed boot or a stop that
 * failed or took over 30 s.
 */
let config: Config
try {
  config = loadConfig()
} catch (err) {
  if (!(err instanceof ConfigError)) throw err
  process.stderr.write(`genjobs: configuration error: ${err.message}\n`)
  process.exit(1)
}

let stopping = false
let bootDone!: (a: App) => void
const booted = new Promise<App>((resolve) => { bootDone = resolve })

/** Drain and exit; a signal during boot waits for the boot, then stops what it started. */
function stop (why: string): void {
  if (stopping) return
  stopping = true
  const force = setTimeout(() => { process.stderr.write('shutdown took too long; exiting\n'); process.exit(1) }, 30_000)
  force.unref()
  booted.then(async (a) => {
    a.services.log.info({ reason: why }, 'draining and shutting down')
    await a.close()
    process.exit(0)
  }).catch((err) => { process.stderr.write(`shutdown failed: ${err}\n`); process.exit(1) })
}

// Installed before the boot: a supervisor's SIGTERM during the embedded PostgreSQL's start
// stops it too instead of killing the process around a running database.
for (const sig of ['SIGTERM', 'SIGINT'] as const) process.on(sig, () => stop(sig))

/**
 * Under `npm start` the service must not outlive npm (a supervisor that kills npm, even with
 * SIGKILL, expects the server gone): npm runs `exec node ...` (package.json), so npm is our
 * parent; once it is gone we are re-parented, and we drain and exit. Only under npm: a server
 * started from a shell with nohup must survive that shell.
 */
if (process.env.npm_lifecycle_event) {
  const parent = process.ppid
  setInterval(() => { if (process.ppid !== parent) stop('parent npm exited') }, 500).unref()
}

try {
  const app = await createApp(config)
  bootDone(app)
  if (!stopping) process.stdout.write(`genjobs listening on ${config.publicBaseUrl} (port ${app.port})\n`)
} catch (err) {
  // Any boot mistake (configuration, routing file, upstream schema check, a database that
  // refuses) is one line and exit 1: the process-wide error containment would otherwise log it
  // and leave a half-started process running.
  if (err instanceof ConfigError) process.stderr.write(`genjobs: configuration error: ${err.message}\n`)
  else process.stderr.write(`genjobs: cannot start: ${(err as Error)?.message ?? String(err)}\n`)
  process.exit(1)
}
