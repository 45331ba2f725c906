/**
 * The C SSE client (bench/lib/sse-client.c) for sse-fanout and provider-sse: built with the system's C
 * compiler on first use (cached in the temp directory by the source's hash), one child
 * process per round, driven over stdin/stdout. Null from `nativeClient()` when no compiler is
 * found or the build fails; the scenario then uses the Node client (bench/lib/sse-client.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { buildNative } from './native.js'
import { until } from './scenario.js'
import { closeStreams, openStreams } from './sse-client.js'

/** The client's executable, built on first call; null when it cannot be built here (or SSE_CLIENT=node). */
export function nativeClient (): string | null {
  return process.env.SSE_CLIENT === 'node' ? null : buildNative('sse-client')
}

/** The streams of one round, from either client. */
export interface OpenedStreams {
  /** Streams opened (answered 200). */
  count: number
  failed: number
  statuses: Record<string, number>
  /** The client's own CPU (user + system) so far, µs. */
  cpuUs (): Promise<number>
  /** Waits until every open stream saw `done` (or timeoutMs): each requested stream's done time, performance.now() ms (0: not seen or not opened). */
  done (timeoutMs: number): Promise<number[]>
  close (): Promise<void>
}

export interface NativeOpenOptions {
  port: number
  n: number
  path: (i: number) => string
  headers: (i: number) => Record<string, string>
  sources?: number
  concurrency?: number
}

/** Starts the client and opens n streams (as bench/lib/sse-client.ts openStreams does). */
export async function openNative (bin: string, o: NativeOpenOptions): Promise<OpenedStreams> {
  const child = spawn(bin, [], { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines = lineReader(child)
  const parts: Buffer[] = [Buffer.from(`${o.port} ${o.n} ${o.sources ?? 8} ${o.concurrency ?? 256}\n`)]
  for (let i = 0; i < o.n; i++) {
    let head = ''
    for (const [k, v] of Object.entries(o.headers(i))) head += `${k}: ${v}\r\n`
    const req = Buffer.from(`GET ${o.path(i)} HTTP/1.1\r\nHost: 127.0.0.1:${o.port}\r\n${head}\r\n`, 'latin1')
    parts.push(Buffer.from(`${req.length}\n`), req)
  }
  child.stdin!.write(Buffer.concat(parts))
  const first = await lines.next()
  const m = /^opened (\d+) failed (\d+) ?(.*)$/.exec(first)
  if (!m) { child.kill(); throw new Error(`native SSE client: ${first}`) }
  const statuses: Record<string, number> = {}
  for (const kv of m[3].split(',').filter(Boolean)) { const [k, v] = kv.split('='); statuses[k] = Number(v) }
  return {
    count: Number(m[1]),
    failed: Number(m[2]),
    statuses,
    async cpuUs () {
      child.stdin!.write('cpu\n')
      return Number((await lines.next()).split(' ')[1])
    },
    async done (timeoutMs) {
      child.stdin!.write(`wait ${timeoutMs}\n`)
      await lines.next()
      const times = (await lines.next()).trim().split(' ').filter(Boolean).map(Number)
      // CLOCK_MONOTONIC ns, as process.hrtime; performance.now() is the same clock from timeOrigin.
      const offsetMs = performance.now() - Number(process.hrtime.bigint()) / 1e6
      return times.map(ns => ns === 0 ? 0 : ns / 1e6 + offsetMs)
    },
    async close () {
      if (child.exitCode !== null) return
      const exited = new Promise(resolve => child.once('exit', resolve))
      child.stdin!.end('close\n')
      await exited
    },
  }
}

/** The child's stdout, one line per next() (rejects if the child exits first). */
function lineReader (child: ChildProcess): { next (): Promise<string> } {
  const ready: string[] = []
  const waiting: Array<{ resolve: (l: string) => void; reject: (e: Error) => void }> = []
  let partial = ''
  let ended = false
  child.stdout!.setEncoding('latin1')
  child.stdout!.on('data', (d: string) => {
    partial += d
    let i
    while ((i = partial.indexOf('\n')) >= 0) {
      const l = partial.slice(0, i)
      partial = partial.slice(i + 1)
      const w = waiting.shift()
      if (w) w.resolve(l); else ready.push(l)
    }
  })
  child.once('exit', (code) => {
    ended = true
    for (const w of waiting.splice(0)) w.reject(new Error(`native SSE client exited with ${code}`))
  })
  return {
    next () {
      const l = ready.shift()
      if (l !== undefined) return Promise.resolve(l)
      if (ended) return Promise.reject(new Error('native SSE client exited'))
      return new Promise((resolve, reject) => waiting.push({ resolve, reject }))
    },
  }
}

/**
 * Opens the streams with the C client, or with the Node client in this process when there is
 * no compiler (SSE_CLIENT=node): the C client keeps the measuring process's own garbage
 * collections and CPU out of the latencies it reports.
 */
export async function openSse (o: NativeOpenOptions): Promise<OpenedStreams> {
  const bin = nativeClient()
  if (bin !== null) return openNative(bin, o)
  const r = await openStreams(o)
  const streams = r.streams.filter(s => s.openedAt > 0)
  return {
    count: streams.length,
    failed: r.failed,
    statuses: r.statuses,
    // The runner's own process: whatever else it does is counted in too.
    cpuUs: async () => { const u = process.cpuUsage(); return u.user + u.system },
    done: async (timeoutMs) => {
      await until(() => streams.every(s => s.doneAt > 0), timeoutMs, 5)
      const at = new Array<number>(o.n).fill(0)
      for (const s of streams) at[s.index] = s.doneAt
      return at
    },
    close: async () => { closeStreams(r.streams) },
  }
}
