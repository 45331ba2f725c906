/**
 * Many SSE streams from one process, spread over loopback source addresses 127.0.0.2..
 * (each source address has its own ephemeral port range, so 10000+ streams and the TIME_WAIT
 * sockets of earlier rounds never exhaust it). A minimal HTTP/1.1 client on raw sockets: it
 * sends the GET, checks the status line and scans the bytes for `event: done`. node:http's
 * client costs several times more per event, and with 10000 streams a heavy client would
 * time itself rather than the server. A stream counts as open when its first bytes arrived
 * with status 200; `doneAt` is when `event: done` arrived.
 */
import { connect, type Socket } from 'node:net'

/** What ends a stream. */
const DONE = Buffer.from('event: done', 'latin1')
/** Every socket's reads land here (net onread): they are scanned at once, never kept. */
const READ_BUFFER = Buffer.alloc(64 * 1024)

export interface Stream {
  /** The stream's number (`path(i)`, `headers(i)`). */
  index: number
  socket: Socket
  status: number
  openedAt: number
  doneAt: number
  tail: string
}

export interface OpenOptions {
  port: number
  path: (i: number) => string
  headers: (i: number) => Record<string, string>
  n: number
  sources?: number
  concurrency?: number
  timeoutMs?: number
}

export async function openStreams (o: OpenOptions): Promise<{ streams: Stream[]; failed: number; ms: number; statuses: Record<string, number> }> {
  const sources = o.sources ?? 8
  const concurrency = o.concurrency ?? 256
  const streams: Stream[] = []
  const statuses: Record<string, number> = {}
  let failed = 0
  let next = 0
  const t0 = performance.now()
  await new Promise<void>((resolve) => {
    let settled = 0
    let inflight = 0
    const timer = setTimeout(() => { failed += o.n - settled; resolve() }, o.timeoutMs ?? 120_000)
    const finish = () => { settled++; inflight--; if (settled === o.n) { clearTimeout(timer); resolve() } else pump() }
    const pump = () => {
      while (inflight < concurrency && next < o.n) {
        const i = next++
        inflight++
        let counted = false
        const once = (ok: boolean) => { if (counted) return; counted = true; if (!ok) failed++; finish() }
        const s: Stream = { index: i, socket: null as unknown as Socket, status: 0, openedAt: 0, doneAt: 0, tail: '' }
        // Reads land in one shared buffer (onread): no Buffer, string or stream event per read,
        // so the client's own cost per received event stays small (it shares the machine).
        const socket = connect({
          host: '127.0.0.1',
          port: o.port,
          localAddress: `127.0.0.${2 + (i % sources)}`,
          onread: { buffer: READ_BUFFER, callback: (n: number, buf: Uint8Array) => { received(s, n, buf); return true } },
        })
        s.socket = socket
        socket.setNoDelay(true)
        let head = ''
        for (const [k, v] of Object.entries(o.headers(i))) head += `${k}: ${v}\r\n`
        socket.write(`GET ${o.path(i)} HTTP/1.1\r\nHost: 127.0.0.1:${o.port}\r\n${head}\r\n`)
        const received = (s: Stream, n: number, buf: Uint8Array): void => {
          if (s.status === 0) {
            s.status = n >= 12 ? (buf[9] - 48) * 100 + (buf[10] - 48) * 10 + (buf[11] - 48) : -1
            statuses[s.status] = (statuses[s.status] ?? 0) + 1
            if (s.status !== 200) { socket.destroy(); once(false); return }
            s.openedAt = performance.now()
            streams.push(s)
            once(true)
          }
          if (s.doneAt === 0) {
            const chunk = Buffer.from(buf.buffer, buf.byteOffset, n)
            if (chunk.indexOf(DONE) >= 0 || (s.tail !== '' && Buffer.from(s.tail + chunk.toString('latin1', 0, Math.min(n, DONE.length)), 'latin1').indexOf(DONE) >= 0)) s.doneAt = performance.now()
            else s.tail = chunk.toString('latin1', Math.max(0, n - DONE.length), n)
          }
        }
        socket.on('error', () => once(false))
        socket.on('close', () => once(false))
      }
    }
    pump()
  })
  return { streams, failed, ms: performance.now() - t0, statuses }
}

/** Closes every stream from the client side. */
export function closeStreams (streams: Stream[]): void {
  for (const s of streams) s.socket.destroy()
}
