/**
 * Baseline for `sse-hold` and `sse-fanout`: a plain node:http SSE server. GET /sse/:job holds a
 * stream (the service's headers and opening frames, no auth); POST /publish/:job writes one
 * `status` event and `done` to every stream of that job and ends them, as the service does
 * when a job is cancelled.
 */
import { createServer, type ServerResponse } from 'node:http'

const byJob = new Map<string, Set<ServerResponse>>()
let seq = 0

const server = createServer((req, res) => {
  const url = req.url ?? '/'
  if (req.method === 'GET' && url.startsWith('/sse/')) {
    const job = url.slice(5)
    res.writeHead(200, {
      'X-Request-Id': `req_${++seq}`,
      'Access-Control-Allow-Origin': '*',
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-cache, no-transform',
      Connection: 'keep-alive',
      'X-Accel-Buffering': 'no',
    })
    const id = Date.now()
    res.write(`retry: 3000\n: stream for ${job}\n\nid: ${id}\nevent: status\ndata: ${JSON.stringify({ id: job, status: 'queued', progress: 0 })}\n\n`)
    let set = byJob.get(job)
    if (!set) { set = new Set(); byJob.set(job, set) }
    set.add(res)
    res.on('close', () => { set!.delete(res); if (set!.size === 0 && byJob.get(job) === set) byJob.delete(job) })
    return
  }
  if (req.method === 'POST' && url.startsWith('/publish/')) {
    const job = url.slice(9)
    const set = byJob.get(job)
    let n = 0
    if (set) {
      byJob.delete(job)
      const id = Date.now()
      const text = `id: ${id}\nevent: status\ndata: ${JSON.stringify({ id: job, status: 'cancelled', progress: 0, error_message: 'Cancelled by the client; credits refunded' })}\n\n` +
        `id: ${id + 1}\nevent: done\ndata: ${JSON.stringify({ id: job, status: 'cancelled' })}\n\n`
      for (const s of set) { s.end(text); n++ }
    }
    req.resume()
    res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ delivered: n }))
    return
  }
  res.writeHead(404).end()
})
server.keepAliveTimeout = 0
server.listen(Number(process.env.PORT), '127.0.0.1', () => process.send!({ type: 'ready' }))
process.on('SIGTERM', () => { server.closeAllConnections(); server.close(() => process.exit(0)) })
