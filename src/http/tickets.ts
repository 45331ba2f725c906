import { createHmac, timingSafeEqual } from 'node:crypto'
import { ApiError } from '../errors.js'

/** SSE tickets live 5 minutes (docs/api.md "Server-Sent Events"). */
export const TICKET_TTL_SECONDS = 300

/**
 * SSE tickets (docs/architecture.md "Several nodes"): HMAC-signed `(job, account, expiry)`, valid on any node
 * that shares JWT_SECRET, bound to one job. Format: base64url(JSON).base64url(HMAC-SHA256).
 */
export class Tickets {
  private readonly key: Buffer
  constructor (secret: string) {
    // A key of its own, derived from the session secret, so a ticket is never a valid JWT part.
    this.key = createHmac('sha256', secret).update('genjobs sse ticket v1').digest()
  }

  issue (jobId: string, accountId: number, now = Date.now()): { ticket: string; expires_in: number } {
    const payload = Buffer.from(JSON.stringify({ j: jobId, a: accountId, e: Math.floor(now / 1000) + TICKET_TTL_SECONDS })).toString('base64url')
    return { ticket: `${payload}.${this.mac(payload)}`, expires_in: TICKET_TTL_SECONDS }
  }

  /** The account the ticket was issued to; INVALID_TICKET when bad, expired or for another job. */
  verify (ticket: string, jobId: string, now = Date.now()): number {
    const bad = (why: string) => new ApiError('INVALID_TICKET', `SSE ticket ${why}`)
    const dot = ticket.indexOf('.')
    if (dot <= 0 || ticket.length > 1024) throw bad('is malformed')
    const payload = ticket.slice(0, dot)
    const given = Buffer.from(ticket.slice(dot + 1), 'base64url')
    const expected = Buffer.from(this.mac(payload), 'base64url')
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw bad('is invalid')
    let p: { j?: unknown; a?: unknown; e?: unknown }
    try { p = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) } catch { throw bad('is malformed') }
    if (typeof p.j !== 'string' || typeof p.a !== 'number' || typeof p.e !== 'number') throw bad('is malformed')
    // Tickets are short-lived on purpose (a URL leaks): the fix is a fresh one, so say how.
    if (p.e * 1000 <= now) throw new ApiError('INVALID_TICKET', `SSE ticket has expired (tickets last ${TICKET_TTL_SECONDS} s); ask for a new one with POST /v1/sse/tickets {"jobId"} and reconnect with it`)
    if (p.j !== jobId) throw bad('is bound to a different job')
    return p.a
  }

  private mac (payload: string): string {
    return createHmac('sha256', this.key).update(payload).digest('base64url')
  }
}
