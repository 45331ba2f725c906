/**
 * `--paced R`: the read scenarios' load from the C generator (bench/lib/http-paced.c), which
 * sends request k at start + k/R seconds on a free keep-alive connection, so every server sees
 * the same evenly spaced arrivals. autocannon's overallRate (`--rate`) is a per-second quota
 * each connection spends at full speed before it waits for the next second: a burst every
 * second, which a slower server meets with a queue (many requests a wake-up) and a faster one
 * without (one a wake-up), so at "the same rate" the two still pay for different loads.
 */
import { spawn } from 'node:child_process'
import type { Request } from 'autocannon'
import { buildNative } from './native.js'

export interface PacedOptions {
  url: string
  connections: number
  /** Requests per second in total, evenly spaced. */
  rate: number
  /** Seconds. */
  duration: number
  headers?: Record<string, string>
  /** GET requests to cycle through (request j of the run is list[j % length]); default: GET url. */
  requests?: Request[]
}

/** What the generator prints at the end of a run (bench/lib/http-paced.c). */
export interface PacedResult {
  requests: number
  answered: number
  non2xx: number
  errors: number
  /** Requests sent more than 1 ms after their due time. */
  late: number
  p50_us: number
  p99_us: number
  max_us: number
  seconds: number
  /** The generator's own CPU, µs. */
  cpu_us: number
}

/** The generator's executable; null where no C compiler builds it. */
export function pacedClient (): string | null {
  return buildNative('http-paced')
}

export async function paced (o: PacedOptions): Promise<PacedResult> {
  const bin = pacedClient()
  if (bin === null) throw new Error('--paced needs a C compiler (cc, or CC) to build bench/lib/http-paced.c')
  const u = new URL(o.url)
  const host = `${u.hostname}:${u.port}`
  const list: Request[] = o.requests ?? [{ method: 'GET', path: u.pathname + u.search, headers: o.headers }]
  const parts: Buffer[] = [Buffer.from(`${u.port} ${o.connections} ${o.rate} ${Math.round(o.duration * 1000)}\n${list.length}\n`)]
  for (const r of list) {
    if ((r.method ?? 'GET') !== 'GET' || r.body !== undefined) throw new Error('--paced sends GET requests without a body only')
    let head = ''
    for (const [k, v] of Object.entries({ ...o.headers, ...r.headers })) head += `${k}: ${String(v)}\r\n`
    const req = Buffer.from(`GET ${r.path ?? u.pathname} HTTP/1.1\r\nHost: ${host}\r\n${head}\r\n`, 'latin1')
    parts.push(Buffer.from(`${req.length}\n`), req)
  }
  const child = spawn(bin, [], { stdio: ['pipe', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  child.stdout.setEncoding('utf8').on('data', (d: string) => { out += d })
  child.stderr.setEncoding('utf8').on('data', (d: string) => { err += d })
  // 'close', not 'exit': the JSON line is only all read once stdout has ended.
  const exited = new Promise<number | null>((resolve) => child.once('close', resolve))
  child.stdin.end(Buffer.concat(parts))
  const code = await exited
  if (code !== 0) throw new Error(`paced load generator exited with ${code}: ${err.trim()}`)
  return JSON.parse(out) as PacedResult
}
