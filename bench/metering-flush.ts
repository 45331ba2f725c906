/**
 * The metering flush (src/db/metering.ts) measured standalone, with job-get's rows:
 *   npm run build && node dist/bench/metering-flush.js [--rows N] [--batches B]
 *
 * Fills the columns as the fast path does (GET /v1/jobs/{id} metered under an interned prefix
 * plus the cached job id, 100 accounts, 1000 jobs, generated request ids) and writes B batches
 * of N rows with writeMeterBatch into a fresh database. Figures: this process's CPU per row
 * (building the COPY text and the rollup, postgres.js), the PostgreSQL backend's CPU per row,
 * and the longest event-loop stall during the flushes (what a request waiting behind a flush
 * sees: the p99 of job-get).
 */
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { randomBytes } from 'node:crypto'
import postgres from 'postgres'
import { connect } from '../src/db/connect.js'
import { EndpointTable, MeterColumns, writeMeterBatch } from '../src/db/metering.js'
import { migrate } from '../src/db/migrate.js'
import { pgBackends, pgDelta } from './lib/proc.js'

const arg = (name: string, d: number) => { const i = process.argv.indexOf(name); return i > 0 ? Number(process.argv[i + 1]) : d }
const N = arg('--rows', 20_000)
const B = arg('--batches', 10)
const admin = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const name = `bench_meter_${randomBytes(4).toString('hex')}`
const a = postgres(admin, { max: 1, onnotice: () => {} })
await a.unsafe(`CREATE DATABASE ${name}`)
const url = new URL(admin); url.pathname = `/${name}`
const sql = connect(url.toString(), { max: 2 })
try {
  await migrate(sql)
  const endpoints = new EndpointTable()
  const ep = endpoints.id('GET', '/v1/jobs/', true)
  const ids = Array.from({ length: 1000 }, () => `job_${randomBytes(12).toString('base64url')}`)
  const cols = new MeterColumns(N, endpoints, 'abcd1234')
  let reqNum = 0
  const fill = () => {
    cols.reset()
    const now = Date.now()
    for (let i = 0; i < N; i++) {
      const j = i % 1000
      cols.push(now + Math.floor(i / 30), 1 + (j % 100), 1 + (j % 100), ep, 'GET', ids[j], 200, 0, 0.01 + (i % 97) / 1000, ++reqNum, null)
    }
  }
  fill()
  await writeMeterBatch(sql, cols) // warm-up
  const h = monitorEventLoopDelay({ resolution: 1 })
  let cpu = 0
  let pgCpu = 0
  let wall = 0
  for (let b = 0; b < B; b++) {
    fill()
    const pg0 = pgBackends(name)
    const c0 = process.cpuUsage()
    const t0 = performance.now()
    h.enable()
    await writeMeterBatch(sql, cols)
    h.disable()
    wall += performance.now() - t0
    const c = process.cpuUsage(c0)
    cpu += c.user + c.system
    pgCpu += pgDelta(pg0, pgBackends(name))
  }
  const rows = N * B
  console.log(`${B} flushes of ${N} rows: ${(cpu / rows).toFixed(2)} µs CPU/row in this process, ${(pgCpu / rows).toFixed(2)} µs/row PostgreSQL, ` +
    `${(wall / B).toFixed(1)} ms wall per flush; event-loop stall max ${(h.max / 1e6).toFixed(1)} ms, p99 ${(h.percentile(99) / 1e6).toFixed(1)} ms`)
} finally {
  await sql.end({ timeout: 5 })
  await a.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
  await a.end()
}
