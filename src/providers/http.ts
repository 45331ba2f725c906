/**
 * Provider API calls of the real adapters (docs/architecture.md "Providers and media"): the JSON
 * client of src/net/json-client.ts (a per-call timeout combined with the caller's signal, a cap
 * on the answer's size) behind the provider's request budget, and the error mapping every
 * adapter shares:
 * - no answer (network error, reset, timeout, abort), 408, 429, 5xx -> UpstreamUnavailable
 *   (indefinite; `retryAfterMs` from Retry-After, seconds or an HTTP date);
 * - any other 4xx -> UpstreamRefused (definitive).
 * Adapters read the status themselves where a non-2xx means something else (fal's result of a
 * failed request), and call `raiseForStatus` otherwise.
 */
import type { Client } from '../net/h1-client.js'
import { AnswerTooLarge, requestJson, type JsonAnswer } from '../net/json-client.js'
import { UpstreamRefused, UpstreamUnavailable } from './upstream.js'
import { budgetOf } from './budget.js'

/** Transport settings an adapter takes in its constructor (tests pass a client or short timeouts). */
export interface HttpSettings {
  /** Per-request timeout in ms (default 15000). */
  timeoutMs?: number
  /** The HTTP client (default: the thread's provider client, src/net/json-client.ts `providerClient`). */
  client?: Client
}

/** A provider's answer (src/net/json-client.ts): status, lower-cased headers, parsed JSON or null, text. */
export type UpstreamResponse = JsonAnswer

/** Answers larger than this are cut off and treated as unreadable (status and result JSON are small). */
const MAX_BODY_BYTES = 4 * 1024 * 1024
const DEFAULT_TIMEOUT_MS = 15_000

/**
 * One request. Resolves with any HTTP status; throws UpstreamUnavailable when there is no
 * complete answer (network error, timeout, the caller's abort, an oversized body).
 * With a request budget for `provider` (src/providers/budget.ts) the request first waits for
 * its turn: a GET (status, result) is a poll, deferred first; any other method (submit, cancel)
 * reserves its turn. An answer 429 lowers that budget on every node for its Retry-After.
 */
export async function upstreamRequest (provider: string, method: 'GET' | 'POST' | 'PUT', url: string, opts: HttpSettings & {
  headers?: Record<string, string>
  json?: unknown
  signal?: AbortSignal
} = {}): Promise<UpstreamResponse> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS
  const budget = budgetOf(provider)
  if (budget) {
    // Waiting for a turn does not count against the request's own timeout.
    try { await budget.acquire(method === 'GET' ? 'poll' : 'call', opts.signal) } catch (err) {
      if (err instanceof UpstreamUnavailable) throw err
      throw new UpstreamUnavailable(`${provider}: ${method} ${safeUrl(url)}: aborted while waiting for the request budget`)
    }
  }
  try {
    const res = await requestJson(method, url, { ...opts, timeoutMs, maxBytes: MAX_BODY_BYTES })
    if (res.status === 429 && budget) budget.throttled(parseRetryAfter(res.headers['retry-after']))
    return res
  } catch (err) {
    if (err instanceof AnswerTooLarge) throw new UpstreamUnavailable(`${provider}: ${err.message}`, err.status)
    throw new UpstreamUnavailable(`${provider}: ${method} ${safeUrl(url)}: ${(err as Error).message}`)
  }
}

/** Throws the mapped error for a non-2xx answer; returns the answer otherwise. */
export function raiseForStatus (provider: string, res: UpstreamResponse): UpstreamResponse {
  if (res.status >= 200 && res.status < 300) return res
  const detail = errorText(res)
  if (res.status === 408 || res.status === 429 || res.status >= 500) {
    throw new UpstreamUnavailable(`${provider}: HTTP ${res.status}${detail ? `: ${detail}` : ''}`, res.status, parseRetryAfter(res.headers['retry-after']))
  }
  throw new UpstreamRefused(`${provider}: HTTP ${res.status}${detail ? `: ${detail}` : ''}`, res.status)
}

/** Retry-After as ms: delta-seconds or an HTTP date (RFC 9110 10.2.3); null when absent or unreadable. */
export function parseRetryAfter (value: string | undefined, nowMs = Date.now()): number | null {
  if (value === undefined) return null
  const v = value.trim()
  if (/^\d+$/.test(v)) return Number(v) * 1000
  if (!/^[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT$/.test(v)) return null // IMF-fixdate only (RFC 9110 5.6.7)
  const at = Date.parse(v)
  if (Number.isNaN(at)) return null
  return Math.max(0, at - nowMs)
}

/** A short human text from an error answer: `detail`, `message`, `msg`, `error` or the raw text. */
export function errorText (res: UpstreamResponse): string {
  const j = res.json
  const pick = (v: unknown): string | null => {
    if (typeof v === 'string') return v
    if (Array.isArray(v)) return v.map(x => (x && typeof x === 'object' && 'msg' in x) ? String((x as { msg: unknown }).msg) : JSON.stringify(x)).join('; ')
    return null
  }
  if (j && typeof j === 'object') {
    for (const k of ['detail', 'message', 'msg', 'error', 'title']) {
      const s = pick(j[k])
      if (s) return s.slice(0, 500)
    }
  }
  return res.text.slice(0, 200)
}

/** The URL without credentials or query (for error messages that may be logged). */
function safeUrl (url: string): string {
  try { const u = new URL(url); return `${u.origin}${u.pathname}` } catch { return '<bad url>' }
}

/**
 * Words providers use for a safety / content-policy refusal of a prompt or an output (fal
 * `content_policy_violation`, Replicate E005 "flagged as sensitive", "NSFW"). Kept small on
 * purpose: a false positive only changes the flag on an already failed job.
 */
const CONTENT_POLICY = /content[_ -]?polic|nsfw|flagged as sensitive|\bE005\b|safety (checker|filter|system)|moderation/i

export function looksLikeContentPolicy (text: string | null | undefined): boolean {
  return typeof text === 'string' && CONTENT_POLICY.test(text)
}

/** A progress percentage (0-100) from the last log line that has one ("45%", tqdm bars); undefined when none. */
export function progressFromLogs (logs: string | null | undefined): number | undefined {
  if (typeof logs !== 'string' || logs.length === 0) return undefined
  const lines = logs.split(/\r?\n|\r/)
  for (let i = lines.length - 1; i >= 0; i--) {
    const m = /(\d{1,3})%/.exec(lines[i])
    if (m) { const p = Number(m[1]); if (p <= 100) return p }
  }
  return undefined
}

/** `base` without a trailing slash. */
export function trimBase (base: string): string {
  return base.replace(/\/+$/, '')
}

/**
 * The error for a non-2xx answer to a status or result call. Such an answer is not a verdict on
 * the job (the key may have rotated, a replica may not know the id yet): the caller keeps the job
 * running, retries with backoff, and its deadline ends the job (money rules).
 */
export function notAVerdict (what: string, res: UpstreamResponse): UpstreamUnavailable {
  const detail = errorText(res)
  return new UpstreamUnavailable(`${what}: HTTP ${res.status}${detail ? `: ${detail}` : ''}`, res.status, parseRetryAfter(res.headers['retry-after']))
}
