/**
 * How a webhook attempt ends (docs/api.md "Webhooks"; docs/architecture.md "Threads"): the
 * attempt's timeout and claim lease, how an answer is judged, the delivery's state after it, and
 * the one-line `last_error` of a failure. Pure; the delivery pool (src/webhooks/delivery-worker.ts)
 * and the manual sends (src/webhooks/delivery-now.ts) both decide with it. Signing is
 * src/webhooks/signing.ts, the schedule src/webhooks/retry-schedule.ts, and where an attempt may
 * connect is the address policy of src/net.
 */
import { RefusedDestination } from '../net/address-policy.js'
import { retryDelayMs } from './retry-schedule.js'

/** Whole-request timeout of one attempt (docs/api.md "Webhooks"). */
export const DELIVERY_TIMEOUT_MS = 10_000

/**
 * How an HTTP answer ends an attempt: any 2xx delivers; 410 Gone means "stop sending" (the
 * delivery is disabled, and a registered webhook deactivated); everything else, redirects
 * included (never followed: the Location could point anywhere), is retried.
 */
export function classifyStatus (status: number): 'delivered' | 'gone' | 'retry' {
  if (status >= 200 && status < 300) return 'delivered'
  if (status === 410) return 'gone'
  return 'retry'
}

/** What one attempt observed. `permanent`: the URL itself can never be delivered to. */
export interface AttemptResult {
  statusCode: number | null
  latencyMs: number | null
  error: string | null
  permanent?: boolean
}

/** The delivery's state after an attempt. */
export interface Outcome {
  status: 'delivered' | 'pending' | 'failed' | 'disabled'
  /** When pending: wait this long before the next attempt. */
  delayMs: number | null
  /** For a registered webhook answering 410: deactivate it with this reason. */
  disableWebhook: string | null
}

/** Decides the state after attempt number `attempt` (1-based) produced `r`. */
export function outcomeOf (r: AttemptResult, attempt: number, opts: { scale?: number; registered: boolean }): Outcome {
  if (r.statusCode !== null) {
    const c = classifyStatus(r.statusCode)
    if (c === 'delivered') return { status: 'delivered', delayMs: null, disableWebhook: null }
    if (c === 'gone') {
      return { status: 'disabled', delayMs: null, disableWebhook: opts.registered ? 'receiver answered 410 Gone' : null }
    }
  }
  if (r.permanent) return { status: 'failed', delayMs: null, disableWebhook: null }
  const delay = retryDelayMs(attempt, opts.scale ?? 1)
  if (delay === null) return { status: 'failed', delayMs: null, disableWebhook: null }
  return { status: 'pending', delayMs: delay, disableWebhook: null }
}

/** A short, single-line description of a failed request for `last_error`. */
export function describeError (err: unknown): string {
  const e = err as { name?: string; code?: string; message?: string; cause?: unknown }
  if (e?.name === 'TimeoutError') return `timeout: no answer within ${DELIVERY_TIMEOUT_MS / 1000} s`
  if (e instanceof RefusedDestination) return e.message
  const cause = e?.cause as { code?: string; message?: string } | undefined
  if (cause instanceof RefusedDestination) return cause.message
  const code = e?.code ?? cause?.code
  const msg = (e?.message ?? String(err)).replace(/\s+/g, ' ')
  return (code && !msg.includes(code) ? `${code}: ${msg}` : msg).slice(0, 500)
}
