/**
 * fal queue API adapter (docs/providers.md "fal").
 * - submit: `POST {queue}/{app}?fal_webhook=<callback>` with `Authorization: Key <FAL_KEY>`;
 *   the answer's `request_id`, `status_url`, `response_url`, `cancel_url` are kept in the handle
 *   (fal builds them from the app's owner/alias, not always the submitted path, so we use them).
 * - status: `GET status_url?logs=1` (IN_QUEUE, IN_PROGRESS, COMPLETED); on COMPLETED the result
 *   is read from `response_url`: a 2xx is the output, a 4xx with `detail` is the job's failure, a
 *   5xx with `X-Fal-Retryable: false` too. A COMPLETED carrying `error`/`error_type` is a failure.
 * - cancel: `PUT cancel_url`: a 2xx (202 CANCELLATION_REQUESTED) is 'requested', not cancelled:
 *   the app decides and may still finish and bill; the job is followed until fal says how it ended.
 * - 409 is retried with backoff on every call, as fal's Python client does (`RETRY_CODES`).
 * - lookup of a lost submission: fal's platform API lists our requests per endpoint
 *   (`GET {FAL_API_URL}/v1/models/requests/by-endpoint?endpoint_id=&start=&expand=payloads`);
 *   a request whose `json_input` is the input we sent is ours (docs/providers.md "No duplicate
 *   upstream jobs").
 * - callbacks: Ed25519 over `request_id\nuser_id\ntimestamp\nhex(sha256(body))`, headers
 *   X-Fal-Webhook-Request-Id / -User-Id / -Timestamp / -Signature (hex), against the keys of
 *   fal's JWKS (OKP/Ed25519, `x` base64url), cached at most 24 h and re-fetched once when no
 *   cached key verifies (key rotation); timestamp within 300 s. The body
 *   `{request_id, status: OK|ERROR, payload, error}` is signed, so it gives the state.
 */
import { createHash } from 'node:crypto'
import { errorText, looksLikeContentPolicy, notAVerdict, progressFromLogs, raiseForStatus, trimBase, upstreamRequest, type HttpSettings, type UpstreamResponse } from './http.js'
import { sameInput, UpstreamUnavailable, type CancelOutcome, type RawCallback, type UpstreamAdapter, type UpstreamHandle, type UpstreamLookup, type UpstreamRequest, type UpstreamState, type VerifiedCallback } from './upstream.js'
import type { ProviderJson } from '../net/json-client.js'
import { keyThatVerifies, Ed25519Key } from './ed25519.js'

export interface FalConfig extends HttpSettings {
  /** FAL_KEY. */
  key: string
  /** FAL_QUEUE_URL (default https://queue.fal.run). */
  queueUrl?: string
  /** FAL_JWKS_URL (default https://rest.fal.ai/.well-known/jwks.json). */
  jwksUrl?: string
  /** FAL_API_URL: fal's platform API, where requests are listed (default https://api.fal.ai). */
  apiUrl?: string
  /** Attempts of a call answered 409 (default 5; fal's Python client retries 409 up to 10 times). */
  conflictAttempts?: number
  /** How long fetched keys are trusted (default and maximum 24 h). */
  jwksMaxAgeMs?: number
  /** A signature no cached key verifies re-fetches the JWKS at most this often (default 60 s). */
  jwksMinRefreshMs?: number
  /** Callback timestamp tolerance in seconds (default 300). */
  toleranceS?: number
  /** Clock in ms (tests). */
  now?: () => number
}

const DAY_MS = 24 * 3600 * 1000
/** First wait before retrying a 409 (doubled each time, at most 2 s). */
const CONFLICT_BACKOFF_MS = 100
/** Pages of the request list read for one lookup (100 requests each). */
const LOOKUP_PAGES = 10

export class FalAdapter implements UpstreamAdapter {
  readonly name = 'fal' as const
  readonly lookup = 'list' as const
  private readonly base: string
  private readonly apiBase: string
  private readonly jwksUrl: string
  private readonly jwksMaxAgeMs: number
  private readonly jwksMinRefreshMs: number
  private readonly toleranceS: number
  private readonly now: () => number
  private jwks: { keys: Ed25519Key[]; fetchedAt: number } | null = null
  private jwksLoading: Promise<Ed25519Key[]> | null = null
  /** The key that verified the last callback: tried first (fal signs with one key at a time). */
  private lastKey: Ed25519Key | null = null
  /** How many times the JWKS was fetched (operators and tests read it). */
  jwksFetches = 0

  constructor (private readonly cfg: FalConfig) {
    this.base = trimBase(cfg.queueUrl ?? 'https://queue.fal.run')
    this.apiBase = trimBase(cfg.apiUrl ?? 'https://api.fal.ai')
    this.jwksUrl = cfg.jwksUrl ?? 'https://rest.fal.ai/.well-known/jwks.json'
    this.jwksMaxAgeMs = Math.min(cfg.jwksMaxAgeMs ?? DAY_MS, DAY_MS)
    this.jwksMinRefreshMs = cfg.jwksMinRefreshMs ?? 60_000
    this.toleranceS = cfg.toleranceS ?? 300
    this.now = cfg.now ?? Date.now
  }

  private get auth () { return { authorization: `Key ${this.cfg.key}` } }

  /**
   * One call, a 409 retried with backoff as fal's Python client does (its RETRY_CODES are 408,
   * 409 and 429; 408 and 429 are left to the job's own backoff and Retry-After here). The last
   * 409 is returned to the caller.
   */
  private async call (method: 'GET' | 'POST' | 'PUT', url: string, signal?: AbortSignal, json?: unknown): Promise<UpstreamResponse> {
    const attempts = Math.max(1, this.cfg.conflictAttempts ?? 5)
    for (let i = 1; ; i++) {
      const res = await upstreamRequest('fal', method, url, { ...this.cfg, headers: this.auth, json, signal })
      if (res.status !== 409 || i >= attempts) return res
      await sleep(Math.min(2000, CONFLICT_BACKOFF_MS * 2 ** (i - 1)), signal)
    }
  }

  async submit (req: UpstreamRequest, signal?: AbortSignal): Promise<UpstreamHandle> {
    const app = req.model.replace(/^\/+|\/+$/g, '')
    const url = new URL(`${this.base}/${app}`)
    if (req.callbackUrl) url.searchParams.set('fal_webhook', req.callbackUrl)
    const answer = await this.call('POST', url.toString(), signal, req.input)
    // Still 409 after the retries: fal did not take it (a conflict is not an acceptance).
    if (answer.status === 409) throw new UpstreamUnavailable(`fal: HTTP 409 after ${this.cfg.conflictAttempts ?? 5} attempts: ${errorText(answer)}`, 409, null, true)
    const res = raiseForStatus('fal', answer)
    const id = res.json?.request_id
    if (typeof id !== 'string' || id === '') throw new UpstreamUnavailable(`fal: submission answered ${res.status} without a request_id`, res.status)
    // fal's own URLs when it gave them; else the documented shape on the app's owner/alias.
    const appBase = `${this.base}/${app.split('/').slice(0, 2).join('/')}/requests/${encodeURIComponent(id)}`
    const pick = (k: string, fallback: string) => typeof res.json[k] === 'string' && res.json[k] !== '' ? res.json[k] as string : fallback
    return {
      id,
      model: req.model,
      urls: { status: pick('status_url', `${appBase}/status`), response: pick('response_url', appBase), cancel: pick('cancel_url', `${appBase}/cancel`) },
    }
  }

  async status (handle: UpstreamHandle, signal?: AbortSignal): Promise<UpstreamState> {
    const urls = this.urlsOf(handle)
    const statusUrl = new URL(urls.status)
    statusUrl.searchParams.set('logs', '1')
    const res = await this.call('GET', statusUrl.toString(), signal)
    if (res.status < 200 || res.status >= 300) throw notAVerdict('fal status', res)
    const body = res.json ?? {}
    switch (body.status) {
      case 'IN_QUEUE': return { state: 'queued' }
      case 'IN_PROGRESS': {
        const progress = progressFromLogs(logsText(body.logs))
        return progress === undefined ? { state: 'running' } : { state: 'running', progress }
      }
      case 'COMPLETED': {
        // A COMPLETED that carries `error` / `error_type` ended in failure (not a success, and
        // not "read the result until the deadline").
        if (body.error || body.error_type) return failure(String(body.error || body.error_type), body.error_type)
        const result = await this.call('GET', urls.response, signal)
        return resultState(result)
      }
      default: return { state: 'running' } // unknown upstream status: non-terminal (upstream.ts)
    }
  }

  async cancel (handle: UpstreamHandle, signal?: AbortSignal): Promise<CancelOutcome> {
    const res = await this.call('PUT', this.urlsOf(handle).cancel, signal)
    // 202 CANCELLATION_REQUESTED: a request in progress gets a signal and its app decides; it may
    // still finish and bill. Only a later status or callback says how it ended.
    if (res.status >= 200 && res.status < 300) return 'requested'
    if (res.status === 408 || res.status === 429 || res.status >= 500) raiseForStatus('fal', res)
    return false // 400 ALREADY_COMPLETED, 404: fal will not cancel it
  }

  /**
   * Our requests to `q.model` since `q.since` whose input is the one we sent, oldest first
   * (fal's platform API; with a candidate, that request only). fal keeps no metadata of ours
   * and the list does not show the webhook URL, so the input is the match: the caller skips
   * requests another job already holds.
   */
  async find (q: UpstreamLookup, signal?: AbortSignal): Promise<UpstreamHandle[]> {
    const app = q.model.replace(/^\/+|\/+$/g, '')
    const found: Array<{ id: string; at: number }> = []
    let cursor: string | null = null
    for (let page = 0; page < LOOKUP_PAGES; page++) {
      const url = new URL(`${this.apiBase}/v1/models/requests/by-endpoint`)
      url.searchParams.set('endpoint_id', app)
      url.searchParams.set('start', q.since.toISOString())
      url.searchParams.set('expand', 'payloads')
      url.searchParams.set('limit', '100')
      if (q.candidate) url.searchParams.set('request_id', q.candidate)
      if (cursor) url.searchParams.set('cursor', cursor)
      const res = await this.call('GET', url.toString(), signal)
      if (res.status < 200 || res.status >= 300) throw notAVerdict('fal request list', res)
      const items = Array.isArray(res.json?.items) ? res.json.items : null
      if (items === null) throw new UpstreamUnavailable('fal request list: answer without items', res.status)
      for (const it of items) {
        if (typeof it?.request_id !== 'string' || it.request_id === '') continue
        if (q.candidate && it.request_id !== q.candidate) continue
        if (!sameInput(it.json_input, q.input)) continue
        found.push({ id: it.request_id, at: Date.parse(it.sent_at ?? it.started_at ?? '') || 0 })
      }
      cursor = res.json?.has_more === true && typeof res.json?.next_cursor === 'string' ? res.json.next_cursor : null
      if (cursor === null) {
        found.sort((a, b) => a.at - b.at)
        return found.map(f => ({ id: f.id, model: q.model }))
      }
    }
    throw new UpstreamUnavailable(`fal request list: more than ${LOOKUP_PAGES * 100} requests since ${q.since.toISOString()}`)
  }

  async verifyCallback (req: RawCallback): Promise<VerifiedCallback> {
    const requestId = req.headers['x-fal-webhook-request-id']
    const userId = req.headers['x-fal-webhook-user-id']
    const ts = req.headers['x-fal-webhook-timestamp']
    const sigHex = req.headers['x-fal-webhook-signature']
    if (!requestId || !userId || !ts || !sigHex) return { ok: false, reason: 'missing X-Fal-Webhook-* headers' }
    if (!/^\d+$/.test(ts)) return { ok: false, reason: 'bad X-Fal-Webhook-Timestamp' }
    if (Math.abs(Math.floor(this.now() / 1000) - Number(ts)) > this.toleranceS) return { ok: false, reason: `timestamp outside ${this.toleranceS} s` }
    if (!/^[0-9a-f]{128}$/i.test(sigHex)) return { ok: false, reason: 'bad X-Fal-Webhook-Signature' }
    const message = Buffer.from(`${requestId}\n${userId}\n${ts}\n${createHash('sha256').update(req.body).digest('hex')}`, 'utf8')
    const sig = Buffer.from(sigHex, 'hex')
    let keys: Ed25519Key[]
    try { keys = await this.keys(false) } catch (err) { return { ok: false, reason: `fal JWKS unavailable: ${(err as Error).message}` } }
    let verified = await keyThatVerifies(keys, message, sig, this.lastKey)
    if (verified === null && this.jwks && this.now() - this.jwks.fetchedAt >= this.jwksMinRefreshMs) {
      // No cached key verifies: fal may have rotated its keys. Re-fetch, at most once per jwksMinRefreshMs.
      try { keys = await this.keys(true) } catch (err) { return { ok: false, reason: `fal JWKS unavailable: ${(err as Error).message}` } }
      verified = await keyThatVerifies(keys, message, sig, this.lastKey)
    }
    if (verified === null) return { ok: false, reason: 'signature does not verify with any fal key' }
    this.lastKey = verified
    let body: ProviderJson
    try { body = JSON.parse(req.body.toString('utf8')) } catch { return { ok: false, reason: 'body is not JSON' } }
    if (body?.request_id !== undefined && body.request_id !== requestId) return { ok: false, reason: 'body request_id differs from the signed header' }
    const state = callbackState(body)
    return state ? { ok: true, upstreamId: requestId, state } : { ok: true, upstreamId: requestId }
  }

  private urlsOf (handle: UpstreamHandle): { status: string; response: string; cancel: string } {
    const base = `${this.base}/${handle.model.split('/').slice(0, 2).join('/')}/requests/${encodeURIComponent(handle.id)}`
    return {
      status: handle.urls?.status ?? `${base}/status`,
      response: handle.urls?.response ?? base,
      cancel: handle.urls?.cancel ?? `${base}/cancel`,
    }
  }

  /** The JWKS keys, from the cache while younger than jwksMaxAgeMs; concurrent loads share one fetch. */
  private async keys (force: boolean): Promise<Ed25519Key[]> {
    if (!force && this.jwks && this.now() - this.jwks.fetchedAt < this.jwksMaxAgeMs) return this.jwks.keys
    if (this.jwksLoading) return this.jwksLoading
    this.jwksLoading = (async () => {
      try {
        this.jwksFetches++
        const res = raiseForStatus('fal JWKS', await upstreamRequest('fal', 'GET', this.jwksUrl, { ...this.cfg }))
        const keys: Ed25519Key[] = []
        for (const k of Array.isArray(res.json?.keys) ? res.json.keys : []) {
          if (k?.kty !== 'OKP' || k?.crv !== 'Ed25519' || typeof k?.x !== 'string') continue
          try { keys.push(new Ed25519Key(k.x)) } catch { /* a malformed key is skipped */ }
        }
        if (keys.length === 0) throw new Error('no Ed25519 key in the JWKS')
        this.jwks = { keys, fetchedAt: this.now() }
        return keys
      } finally { this.jwksLoading = null }
    })()
    return this.jwksLoading
  }
}

/** The primary media URL first (docs/providers.md "fal": video.url, images[0].url, audio.url, audio_file.url, image.url), then any other image. */
export function falOutputs (payload: ProviderJson): string[] {
  if (!payload || typeof payload !== 'object') return []
  const out: string[] = []
  const add = (v: unknown) => { if (typeof v === 'string' && /^https?:\/\//i.test(v) && !out.includes(v)) out.push(v) }
  add(payload.video?.url)
  if (Array.isArray(payload.images)) add(payload.images[0]?.url)
  add(payload.audio?.url)
  add(payload.audio_file?.url)
  add(payload.image?.url)
  if (Array.isArray(payload.images)) for (const im of payload.images) add(im?.url)
  return out
}

/** Waits `ms`, or less when `signal` aborts. */
function sleep (ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise(resolve => {
    if (signal?.aborted) { resolve(); return }
    const done = () => { clearTimeout(t); signal?.removeEventListener('abort', done); resolve() }
    const t = setTimeout(done, ms)
    signal?.addEventListener('abort', done, { once: true })
  })
}

function logsText (logs: unknown): string | undefined {
  if (!Array.isArray(logs)) return undefined
  return logs.map(l => (l && typeof l === 'object' && typeof (l as { message?: unknown }).message === 'string') ? (l as { message: string }).message : '').join('\n')
}

function failure (reason: string, type?: unknown): UpstreamState {
  if (/cancel/i.test(reason) && !looksLikeContentPolicy(reason)) return { state: 'canceled' }
  return { state: 'failed', reason: reason.slice(0, 500), contentPolicy: type === 'content_policy_violation' || looksLikeContentPolicy(reason) }
}

/** Any `type: content_policy_violation` in a fal error `detail` list. */
function detailIsPolicy (detail: unknown): boolean {
  return Array.isArray(detail) && detail.some(d => d && typeof d === 'object' && (d as { type?: unknown }).type === 'content_policy_violation')
}

/**
 * A 422 `detail` list (pydantic style, `loc` + `type`) that is not a content-policy hit: the
 * app refused the input (validation types, image_too_small, file_download_error, ...). fal's
 * queue accepts such a request and fails it later; the job fails with a neutral message.
 */
function detailIsInput (status: number, detail: unknown): boolean {
  return status === 422 && Array.isArray(detail) && detail.length > 0 && !detailIsPolicy(detail) &&
    detail.every(d => d && typeof d === 'object' && typeof (d as { type?: unknown }).type === 'string')
}

function successState (payload: ProviderJson): UpstreamState {
  // A safety checker that blanked the output says so here (fal image models).
  if (Array.isArray(payload?.has_nsfw_concepts) && payload.has_nsfw_concepts.some((x: unknown) => x === true)) {
    return { state: 'failed', reason: 'fal: output flagged by the safety checker (has_nsfw_concepts)', contentPolicy: true }
  }
  const outputs = falOutputs(payload)
  if (outputs.length === 0) return { state: 'failed', reason: 'fal: result has no media URL', contentPolicy: false }
  return { state: 'succeeded', outputs }
}

/**
 * The result endpoint's answer: 2xx output; 4xx the job's error; a 5xx with `X-Fal-Retryable:
 * false` the job's error too (fal says retrying the same request cannot succeed: the request
 * failed); other 5xx, 408 and 429 unknown (retry).
 */
function resultState (res: UpstreamResponse): UpstreamState {
  if (res.status >= 200 && res.status < 300) return successState(res.json)
  const final = res.status >= 500 && res.headers['x-fal-retryable']?.trim().toLowerCase() === 'false'
  if (!final && (res.status === 408 || res.status === 429 || res.status >= 500 || res.status === 404 || res.status === 401 || res.status === 403)) throw notAVerdict('fal result', res)
  const text = errorText(res)
  if (detailIsPolicy(res.json?.detail)) return { state: 'failed', reason: text, contentPolicy: true }
  if (detailIsInput(res.status, res.json?.detail)) return { state: 'failed', reason: `fal: HTTP 422: ${text}`, contentPolicy: false, inputRefused: true }
  if (final) return { state: 'failed', reason: `fal: HTTP ${res.status} (X-Fal-Retryable: false)${text ? `: ${text}` : ''}`.slice(0, 500), contentPolicy: false }
  return failure(`fal: ${text || `HTTP ${res.status}`}`)
}

/** A signed callback body's state, or undefined when it carries none we can use (status call confirms). */
function callbackState (body: ProviderJson): UpstreamState | undefined {
  if (body?.status === 'OK') {
    if (body.payload === null || body.payload === undefined) return undefined // payload_error: too large to send; read the result
    return successState(body.payload)
  }
  if (body?.status === 'ERROR') {
    const text = [typeof body.error === 'string' ? body.error : '', errorText({ status: 0, headers: {}, json: body.payload, text: '' })].filter(Boolean).join(': ')
    if (detailIsPolicy(body.payload?.detail)) return { state: 'failed', reason: text, contentPolicy: true }
    // `error: "Invalid status code: 422"` with a validation `detail`: the input was refused late.
    if (detailIsInput(422, body.payload?.detail) && /\b422\b/.test(String(body.error ?? ''))) return { state: 'failed', reason: `fal: ${text}`, contentPolicy: false, inputRefused: true }
    return failure(text || 'fal: request failed')
  }
  return undefined
}
