import { connect as netConnect, type Socket } from 'node:net'
import postgres from 'postgres'
import { ApiError } from '../errors.js'
import { containEscaped } from '../escaped.js'

export type Sql = postgres.Sql<Record<string, never>>
/** A transaction handle (inside `sql.begin`). */
export type Tx = postgres.TransactionSql<Record<string, never>>
/** Either: query functions take this so they run inside or outside a transaction. */
export type Q = Sql | Tx

/** Default for DB_STALL_TIMEOUT_MS (docs/decisions.md "Database outage"). */
export const DB_STALL_TIMEOUT_MS = 3000

export interface ConnectOptions {
  max?: number
  /**
   * A connection waiting for an answer that receives nothing for this long is destroyed, so
   * its queries fail (and are answered 503) instead of hanging on a dead network path.
   * 0 disables the watchdog.
   */
  stallMs?: number
}

/**
 * One postgres.js pool. bigint columns come back as numbers: credit balances and ids stay far
 * below 2^53. Notices are silenced (migrations emit them). Every connection carries a stall
 * watchdog (a black-holed database must not hang requests).
 */
/**
 * A plain-data record as postgres.js's json() parameter. Its type asks for JSONValue, which
 * interfaces without an index signature (our records) do not satisfy; the values are plain data.
 */
export function jsonOf (v: unknown): postgres.JSONValue { return v as unknown as postgres.JSONValue }

export function connect (url: string, opts: ConnectOptions = {}): Sql {
  const stallMs = opts.stallMs ?? DB_STALL_TIMEOUT_MS
  // The watchdog reads the PostgreSQL framing, which TLS hides: it is off for TLS URLs.
  const tls = /[?&](sslmode|ssl)=(?!disable)/i.test(url)
  return postgres(url, {
    max: opts.max ?? 10,
    onnotice: () => {},
    idle_timeout: 30,
    connect_timeout: Math.max(1, Math.ceil((stallMs || 5000) / 1000)),
    // Reconnect quickly once the database is back (the default backoff grows to 20 s during an
    // outage, which delayed recovery by as much): 50 ms doubling, at most 1 s.
    backoff: (attempts: number) => Math.min(1, 0.05 * 2 ** attempts),
    ...(stallMs > 0 && !tls ? { socket: (o: { host: string[]; port: number[]; path?: string | false }) => watchedSocket(o, stallMs) } : {}),
    types: {
      bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) },
    },
  } as unknown as postgres.Options<Record<string, never>>) as unknown as Sql
}

/**
 * A TCP socket to PostgreSQL that is destroyed when an answer is owed and no byte arrives for
 * `stallMs`. It counts what is owed from the protocol itself: every Sync ('S') or simple
 * Query ('Q') the client sends, and the startup, is answered by exactly one ReadyForQuery
 * ('Z'). An idle pooled connection, or a LISTEN connection, owes nothing and is never cut.
 */
function watchedSocket (o: { host: string[]; port: number[]; path?: string | false }, stallMs: number): Socket {
  const socket = o.path ? netConnect(o.path) : netConnect(o.port[0] ?? 5432, o.host[0] ?? '127.0.0.1')
  // The driver removes every listener when a connection closes; a late write on the dead
  // socket (EPIPE, ECONNRESET) would then be an uncaught 'error'. Keep a no-op listener on.
  const noop = () => {}
  socket.on('error', noop)
  const removeAll = socket.removeAllListeners.bind(socket)
  socket.removeAllListeners = ((...a: Parameters<typeof removeAll>) => {
    const r = removeAll(...a)
    if (socket.listenerCount('error') === 0) socket.on('error', noop)
    return r
  }) as typeof socket.removeAllListeners
  let owed = 1 // the startup exchange ends with ReadyForQuery
  let timer: NodeJS.Timeout | null = null
  const arm = () => {
    if (timer) clearTimeout(timer)
    timer = owed > 0 ? setTimeout(stalled, stallMs) : null
  }
  const stalled = () => {
    timer = null
    // Destroyed with an error (code DB_STALLED): the driver fails what the connection owes,
    // its startup query included. A close without one made the driver reconnect and keep a
    // startup query waiting through every attempt. The 'error' event always finds a listener
    // (the no-op above survives the driver's removeAllListeners).
    socket.destroy(Object.assign(new Error(`no answer from PostgreSQL within ${stallMs} ms`), { code: 'DB_STALLED' }))
    for (const h of healths) h.markDown('a connection stalled') // callers stop waiting now, not when the driver gives up
  }
  // Outgoing: the first message (startup) has no type byte; every later one is type + int32 length.
  let first = true
  const out = new FrameScanner((type) => { if (type === 0x53 || type === 0x51) owed++ })
  const write = socket.write.bind(socket) as (...a: unknown[]) => boolean
  socket.write = ((chunk: unknown, ...rest: unknown[]) => {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk as Buffer
    if (first) {
      first = false
      // SSLRequest / startup / cancel: length-prefixed, no type byte.
      const len = buf.length >= 4 ? buf.readInt32BE(0) : buf.length
      if (buf.length > len) out.push(buf.subarray(len))
    } else out.push(buf)
    if (timer === null) arm()
    return write(chunk, ...rest)
  }) as typeof socket.write
  // Incoming: progress re-arms the timer; each ReadyForQuery settles one owed answer.
  const inc = new FrameScanner((type) => { if (type === 0x5a) owed = Math.max(0, owed - 1) })
  socket.on('data', (chunk: Buffer) => { inc.push(chunk); arm() })
  socket.on('close', () => { if (timer) clearTimeout(timer); timer = null })
  return socket
}

/** Walks PostgreSQL message frames (1 type byte + int32 length) across chunk boundaries. */
class FrameScanner {
  /** Bytes of the current message body still to skip. */
  private skip = 0
  private header = Buffer.alloc(5)
  private have = 0
  constructor (private readonly onType: (type: number) => void) {}

  push (buf: Buffer): void {
    let i = 0
    while (i < buf.length) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, buf.length - i)
        this.skip -= n
        i += n
        continue
      }
      this.header[this.have++] = buf[i++]
      if (this.have === 5) {
        this.have = 0
        this.onType(this.header[0])
        this.skip = Math.max(0, this.header.readInt32BE(1) - 4)
      }
    }
  }
}

const dbErrors = new WeakSet<object>()

/** The 503 SERVICE_UNAVAILABLE (Retry-After 1 s) answered when PostgreSQL is unreachable. */
export function dbUnavailable (message = 'The database is unreachable; retry shortly (with the same Idempotency-Key for creations)'): ApiError {
  const e = new ApiError('SERVICE_UNAVAILABLE', message, { retry_after: 1 })
  dbErrors.add(e)
  return e
}

const UNAVAILABLE_CODES = new Set([
  'DB_STALLED', 'CONNECTION_CLOSED', 'CONNECTION_DESTROYED', 'CONNECTION_ENDED', 'CONNECT_TIMEOUT',
  'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN',
  // SQLSTATE: admin/crash shutdown, cannot connect now, too many connections, connection exceptions.
  '57P01', '57P02', '57P03', '53300',
])

/**
 * True when `err` means "PostgreSQL is unreachable or going away" (rather than a bad query):
 * such failures are answered 503 SERVICE_UNAVAILABLE with Retry-After and retried later.
 */
export function isDbUnavailable (err: unknown): boolean {
  if (!err || typeof err !== 'object') return false
  if (dbErrors.has(err)) return true
  const code = (err as { code?: unknown }).code
  if (typeof code === 'string' && (UNAVAILABLE_CODES.has(code) || code.startsWith('08'))) return true
  return isDriverFault(err)
}

/**
 * postgres.js 3.4 can throw from a timer on a connection whose socket is already gone
 * (`TypeError: Cannot read properties of null (reading 'write')` in connection.js):
 * a driver fault during an outage, not a bug of ours.
 */
export function isDriverFault (err: unknown): boolean {
  if (!(err instanceof TypeError)) return false
  const stack = err.stack ?? ''
  return /node_modules[\\/]postgres[\\/]/.test(stack) && /reading '(write|end|destroy|removeListener|setKeepAlive|once)'/.test(err.message)
}

let contained = false

/**
 * Installs, once per thread, the last line of defence: an exception the driver throws from its
 * own timers during a database outage, or a connection error nobody awaits any more, is logged
 * and the thread carries on (its actors and their state survive). Any other uncaught exception
 * is contained too where `containOthers` (the main thread, which serves connections: no single
 * request may stop the process; logged and counted as genjobs_uncaught_errors_total), and ends
 * the thread otherwise (worker threads, which their pool restarts from PostgreSQL's state).
 */
export function containDriverFaults (log: (msg: string, err: unknown) => void, containOthers = false): void {
  if (contained) return
  contained = true
  process.on('uncaughtException', (err) => {
    if (isDriverFault(err)) { log('postgres.js fault during a database outage contained', err); return }
    // A query on a connection the outage closed can reject where nobody awaits it any more
    // (postgres.js settles some queries twice when its socket dies mid-answer: the caller saw
    // the first outcome). Node reports that rejection here; it carries no state of ours, so it
    // must not end the process (chaos outage: the main thread exited on one).
    if (isDbUnavailable(err)) { log('database error with no waiting caller during an outage contained', err); return }
    if (containOthers) { containEscaped(err, { error: (o, m) => log(m, (o as { err: unknown }).err) }, 'uncaughtException'); return }
    process.stderr.write(`uncaught exception: ${err?.stack ?? err}\n`)
    process.exit(1)
  })
}

/** Every DbHealth of this thread: a stalled connection turns them all down at once. */
const healths = new Set<DbHealth>()

/**
 * Whether PostgreSQL is reachable, as seen by one thread (docs/decisions.md
 * "Database outage"). It turns "down" when an operation fails for lack of the database
 * (refused, reset, stalled); while down it probes `SELECT 1` on a connection of its own and
 * turns "up" at the first answer. `guard` bounds a caller's wait: an operation still pending
 * when the database is (or goes) down is answered 503 SERVICE_UNAVAILABLE with Retry-After
 * at once; the operation itself runs on and completes or fails when the database decides,
 * so in-memory state never disagrees with what was committed.
 */
const PROBE_TIMEOUT = new Error('probe timeout')

export class DbHealth {
  private down = false
  private readonly listeners = new Set<() => void>()
  private probeTimer: NodeJS.Timeout | null = null
  private probing: Promise<unknown> | null = null
  private closed = false
  /** Consecutive up-probes that timed out (two mark the database down). */
  private slowProbes = 0
  /** Outages seen (up -> down transitions) and the time of the last recovery. */
  readonly stats = { outages: 0, recoveredAt: 0 }

  constructor (
    private readonly probe: () => Promise<unknown>, private readonly probeEveryMs = 250, private readonly onChange?: (up: boolean, why?: string) => void,
    private readonly upProbeEveryMs = 1000, private readonly probeTimeoutMs = 1000
  ) {
    healths.add(this)
    // Also probed while up: a cut that no operation reports (queries parked in the driver's
    // reconnect loop never fail) is seen within about a second.
    this.schedule(this.upProbeEveryMs)
  }

  get isDown (): boolean { return this.down }

  /** Feeds an operation's failure: a database-unavailable error turns the state down. */
  report (err: unknown): void { if (isDbUnavailable(err)) this.markDown(String((err as { code?: unknown }).code ?? err)) }

  markDown (why = 'reported'): void {
    if (this.down || this.closed) return
    this.down = true
    this.stats.outages++
    this.onChange?.(false, why)
    for (const l of [...this.listeners]) l()
    this.schedule(0)
  }

  private schedule (ms: number): void {
    if (this.closed) return
    if (this.probeTimer) clearTimeout(this.probeTimer)
    this.probeTimer = setTimeout(() => { this.tick().catch(() => {}) }, ms)
    this.probeTimer.unref()
  }

  private async tick (): Promise<void> {
    // One probe at a time: a probe hung on a dead path is waited for, not stacked.
    this.probing ??= this.probe().finally(() => { this.probing = null })
    let timer: NodeJS.Timeout | undefined
    let failure: 'timeout' | 'error' | null = null
    try {
      await Promise.race([this.probing, new Promise((_resolve, reject) => { timer = setTimeout(() => reject(PROBE_TIMEOUT), this.probeTimeoutMs) })])
    } catch (err) { failure = err === PROBE_TIMEOUT ? 'timeout' : 'error' } finally { clearTimeout(timer) }
    if (failure === null) {
      this.slowProbes = 0
      if (this.down) {
        this.down = false
        this.stats.recoveredAt = Date.now()
        this.onChange?.(true)
      }
    } else if (!this.down) {
      // An error answer (refused, reset) is an outage now. A probe only slower than its timeout is one
      // when the next is slow too: on a starved machine (a loaded CI runner) one slow round trip
      // is not an outage, and 503s for every request in flight would be worse than the wait. A
      // silent connection owing an answer is cut by the stall watchdog (3 s) either way.
      if (failure === 'error' || ++this.slowProbes >= 2) {
        this.slowProbes = 0
        this.markDown(failure === 'error' ? 'probe failed' : `no probe answer within ${2 * this.probeTimeoutMs} ms`)
        return
      }
      this.schedule(0)
      return
    }
    this.schedule(this.down ? this.probeEveryMs : this.upProbeEveryMs)
  }

  /**
   * `p`, unless the database is or goes down while it is pending: then a 503 after `graceMs`
   * (work that needs no database, such as a cached read, finishes inside the grace).
   */
  guard<T> (p: Promise<T>, graceMs = 25): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined
      let settled = false
      const onDown = () => {
        timer ??= setTimeout(() => {
          if (settled) return
          settled = true
          this.listeners.delete(onDown)
          reject(dbUnavailable())
        }, graceMs)
      }
      if (this.down) onDown(); else this.listeners.add(onDown)
      p.then((v) => {
        this.listeners.delete(onDown)
        clearTimeout(timer)
        if (!settled) { settled = true; resolve(v) }
      }, (err: unknown) => {
        this.listeners.delete(onDown)
        clearTimeout(timer)
        this.report(err)
        if (!settled) { settled = true; reject(err) }
      })
    })
  }

  close (): void {
    healths.delete(this)
    this.closed = true
    if (this.probeTimer) clearTimeout(this.probeTimer)
  }
}

/** How long an actor waits for one read of its own (account row, job row) before answering 503. */
export const READ_TIMEOUT_MS = 5000

/**
 * `p`, or a "database unavailable" failure (code DB_STALLED, answered 503) once `ms` pass
 * without it settling. An actor's mailbox waits on its reads and commits: one lost in the driver
 * during an outage must cost one bounded wait, not the account's every later message (docs/
 * decisions.md "postgres.js write-timer patch"). `p` itself runs on; a read is safe to abandon.
 */
/**
 * Reads that must agree with each other (a job and its ledger entries, which one statement
 * changes together): one read-only transaction at REPEATABLE READ, so every read sees the same
 * snapshot. Reads run in parallel on separate connections can straddle a commit.
 */
export function snapshot<T> (sql: Sql, reads: (tx: Tx) => Promise<T>): Promise<T> {
  return sql.begin('isolation level repeatable read read only', reads) as Promise<T>
}

export function within<T> (p: Promise<T>, ms = READ_TIMEOUT_MS, what = 'query'): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  return Promise.race([
    p,
    new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(Object.assign(new Error(`${what} not settled within ${ms} ms`), { code: 'DB_STALLED' })), ms)
    }),
  ]).finally(() => clearTimeout(timer))
}

/** `SELECT 1`: the health probe's round trip. */
export async function ping (sql: Q): Promise<void> {
  await sql`SELECT 1`
}
