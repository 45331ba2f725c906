/**
 * Baseline for `models`: bare uWebSockets.js answering GET /v1/models with the service's own
 * body bytes (fetched once from the service; BODY_FILE) and nothing else: no routing table,
 * no request id, no metering. The floor the service's front end is compared with. For
 * `job-get` it is a uWS hello-world: BODY (a literal body) at ROUTE (default /v1/models), the
 * cost of uWS itself (parse, send, syscalls) in the same harness.
 */
import { readFileSync } from 'node:fs'
import uWS from 'uWebSockets.js'

const body = process.env.BODY !== undefined ? Buffer.from(process.env.BODY) : readFileSync(process.env.BODY_FILE!)
const contentType = process.env.CONTENT_TYPE ?? 'application/json; charset=utf-8'
const app = uWS.App()
app.get(process.env.ROUTE ?? '/v1/models', (res) => {
  res.cork(() => { res.writeHeader('Content-Type', contentType).end(body) })
})
app.any('/*', (res) => { res.writeStatus('404 Not Found').end() })
app.listen('127.0.0.1', Number(process.env.PORT), (sock) => {
  if (!sock) { process.stderr.write('uws-static: listen failed\n'); process.exit(1) }
  process.on('SIGTERM', () => { uWS.us_listen_socket_close(sock); process.exit(0) })
  process.send!({ type: 'ready' })
})
