/**
 * fal queue API adapter (issue 11, DESIGN.md sections 5 and 7 "Providers").
 * - submit: `POST {queue}/{app}?fal_webhook=<callback>` with `Authorization: Key <FAL_KEY>`;
 *   the answer's `request_id`, `status_url`, `response_url`, `cancel_url` are kept in the handle
 *   (fal builds them from the app's owner/alias, not always the submitted path, so we use them).
 * - status: `GET status_url?logs=1` (IN_QUEUE, IN_PROGRESS, COMPLETED); on COMPLETED the result
 *   is read from `response_url`: a 2xx is the output, a 4xx with `detail` is the job's failure.
 * - cancel: `PUT cancel_url` (202 CANCELLATION_REQUESTED = confirmed).
 * - callbacks: Ed25519 over `request_id\nuser_id\ntimestamp\nhex(sha256(body))`, headers
 *   X-Fal-Webhook-Request-Id / -User-Id / -Timestamp / -Signature (hex), against the keys of
 *   fal's JWKS (OKP/Ed25519, `x` base64url), cached at most 24 h and re-fetched once when no
 *   cached key verifies (key rotation); timestamp within 300 s. The body
 *   `{request_id, status: OK|ERROR, payload, error}` is signed, so it gives the state.
 */
import { createHash, createPublicKey, verify as edVerify, type KeyObject } from 'node:crypto'
import { errorText, looksLikeContentPolicy, notAVerdict, progressFromLogs, raiseForStatus, trimBase, upstreamRequest, type HttpSettings, type UpstreamResponse } from './http.js'
import { UpstreamUnavailable, type RawCallback, type UpstreamAdapter, type UpstreamHandle, type UpstreamRequest, type UpstreamState, type VerifiedCallback } from './upstream.js'

export interface FalConfig extends HttpSettings {
  /** FAL_KEY. */
  key: string
  /** FAL_QUEUE_URL (default https://queue.fal.run). */
  queueUrl?: string
  /** FAL_JWKS_URL (default https://rest.fal.ai/.well-known/jwks.json). */
  jwksUrl?: string
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

/**
 * Whether one of `keys` verifies the Ed25519 signature, each check run in libuv's thread pool
 * (crypto.verify with a callback): ~110 µs of CPU a signature on the bench machine that would
 * otherwise hold the front end's event loop for every callback. A key that cannot check the
 * signature counts as not verifying it.
 */
async function anyKeyVerifies (keys: readonly KeyObject[], message: Buffer, sig: Buffer): Promise<boolean> {
  for (const k of keys) {
    const ok = await new Promise<boolean>((resolve) => { edVerify(null, message, k, sig, (err, valid) => resolve(!err && valid === true)) })
    if (ok) return true
  }
  return false
}

export class FalAdapter implements UpstreamAdapter {
  readonly name = 'fal' as const
  private readonly base: string
  private readonly jwksUrl: string
  private readonly jwksMaxAgeMs: number
  private readonly jwksMinRefreshMs: number
  private readonly toleranceS: number
  private readonly now: () => number
  private jwks: { keys: KeyObject[]; fetchedAt: number } | null = null
  private jwksLoading: Promise<KeyObject[]> | null = null
  /** How many times the JWKS was fetched (operators and tests read it). */
  jwksFetches = 0

  constructor (private readonly cfg: FalConfig) {
    this.base = trimBase(cfg.queueUrl ?? 'https://queue.fal.run')
    this.jwksUrl = cfg.jwksUrl ?? 'https://rest.fal.ai/.well-known/jwks.json'
    this.jwksMaxAgeMs = Math.min(cfg.jwksMaxAgeMs ?? DAY_MS, DAY_MS)
    this.jwksMinRefreshMs = cfg.jwksMinRefreshMs ?? 60_000
    this.toleranceS = cfg.toleranceS ?? 300
    this.now = cfg.now ?? Date.now
  }

  private get auth () { return { authorization: `Key ${this.cfg.key}` } }

  async submit (req: UpstreamRequest, signal?: AbortSignal): Promise<UpstreamHandle> {
    const app = req.model.replace(/^\/+|\/+$/g, '')
    const url = new URL(`${this.base}/${app}`)
    if (req.callbackUrl) url.searchParams.set('fal_webhook', req.callbackUrl)
    const res = raiseForStatus('fal', await upstreamRequest('fal', 'POST', url.toString(), { ...this.cfg, headers: this.auth, json: req.input, signal }))
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
    const res = await upstreamRequest('fal', 'GET', statusUrl.toString(), { ...this.cfg, headers: this.auth, signal })
    if (res.status < 200 || res.status >= 300) throw notAVerdict('fal status', res)
    const body = res.json ?? {}
    switch (body.status) {
      case 'IN_QUEUE': return { state: 'queued' }
      case 'IN_PROGRESS': {
        const progress = progressFromLogs(logsText(body.logs))
        return progress === undefined ? { state: 'running' } : { state: 'running', progress }
      }
      case 'COMPLETED': {
        // Newer queue answers carry the failure on the status itself.
        if (body.error) return failure(String(body.error), body.error_type)
        const result = await upstreamRequest('fal', 'GET', urls.response, { ...this.cfg, headers: this.auth, signal })
        return resultState(result)
      }
      default: return { state: 'running' } // unknown upstream status: non-terminal (upstream.ts)
    }
  }

  async cancel (handle: UpstreamHandle, signal?: AbortSignal): Promise<boolean> {
    const res = await upstreamRequest('fal', 'PUT', this.urlsOf(handle).cancel, { ...this.cfg, headers: this.auth, signal })
    if (res.status >= 200 && res.status < 300) return true
    if (res.status === 408 || res.status === 429 || res.status >= 500) raiseForStatus('fal', res)
    return false // 400 ALREADY_COMPLETED, 404: fal will not cancel it
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
    let keys: KeyObject[]
    try { keys = await this.keys(false) } catch (err) { return { ok: false, reason: `fal JWKS unavailable: ${(err as Error).message}` } }
    let verified = await anyKeyVerifies(keys, message, sig)
    if (!verified && this.jwks && this.now() - this.jwks.fetchedAt >= this.jwksMinRefreshMs) {
      // No cached key verifies: fal may have rotated its keys. Re-fetch, at most once per jwksMinRefreshMs.
      try { keys = await this.keys(true) } catch (err) { return { ok: false, reason: `fal JWKS unavailable: ${(err as Error).message}` } }
      verified = await anyKeyVerifies(keys, message, sig)
    }
    if (!verified) return { ok: false, reason: 'signature does not verify with any fal key' }
    let body: any
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
  private async keys (force: boolean): Promise<KeyObject[]> {
    if (!force && this.jwks && this.now() - this.jwks.fetchedAt < this.jwksMaxAgeMs) return this.jwks.keys
    if (this.jwksLoading) return this.jwksLoading
    this.jwksLoading = (async () => {
      try {
        this.jwksFetches++
        const res = raiseForStatus('fal JWKS', await upstreamRequest('fal', 'GET', this.jwksUrl, { ...this.cfg }))
        const keys: KeyObject[] = []
        for (const k of Array.isArray(res.json?.keys) ? res.json.keys : []) {
          if (k?.kty !== 'OKP' || k?.crv !== 'Ed25519' || typeof k?.x !== 'string') continue
          try { keys.push(createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: k.x }, format: 'jwk' })) } catch { /* a malformed key is skipped */ }
        }
        if (keys.length === 0) throw new Error('no Ed25519 key in the JWKS')
        this.jwks = { keys, fetchedAt: this.now() }
        return keys
      } finally { this.jwksLoading = null }
    })()
    return this.jwksLoading
  }
}

/** The primary media URL first (DESIGN.md 7: video.url, images[0].url, audio.url, audio_file.url, image.url), then any other image. */
export function falOutputs (payload: any): string[] {
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

function logsText (logs: unknown): string | undefined {
  if (!Array.isArray(logs)) return undefined
  return logs.map(l => (l && typeof l === 'object' && typeof (l as any).message === 'string') ? (l as any).message : '').join('\n')
}

function failure (reason: string, type?: unknown): UpstreamState {
  if (/cancel/i.test(reason) && !looksLikeContentPolicy(reason)) return { state: 'canceled' }
  return { state: 'failed', reason: reason.slice(0, 500), contentPolicy: type === 'content_policy_violation' || looksLikeContentPolicy(reason) }
}

/** Any `type: content_policy_violation` in a fal error `detail` list. */
function detailIsPolicy (detail: unknown): boolean {
  return Array.isArray(detail) && detail.some(d => d && typeof d === 'object' && (d as any).type === 'content_policy_violation')
}

function successState (payload: any): UpstreamState {
  // A safety checker that blanked the output says so here (fal image models).
  if (Array.isArray(payload?.has_nsfw_concepts) && payload.has_nsfw_concepts.some((x: unknown) => x === true)) {
    return { state: 'failed', reason: 'fal: output flagged by the safety checker (has_nsfw_concepts)', contentPolicy: true }
  }
  const outputs = falOutputs(payload)
  if (outputs.length === 0) return { state: 'failed', reason: 'fal: result has no media URL', contentPolicy: false }
  return { state: 'succeeded', outputs }
}

/** The result endpoint's answer: 2xx output; 4xx the job's error; 5xx/408/429 unknown (retry). */
function resultState (res: UpstreamResponse): UpstreamState {
  if (res.status >= 200 && res.status < 300) return successState(res.json)
  if (res.status === 408 || res.status === 429 || res.status >= 500 || res.status === 404 || res.status === 401 || res.status === 403) throw notAVerdict('fal result', res)
  const text = errorText(res)
  if (detailIsPolicy(res.json?.detail)) return { state: 'failed', reason: text, contentPolicy: true }
  return failure(`fal: ${text || `HTTP ${res.status}`}`)
}

/** A signed callback body's state, or undefined when it carries none we can use (status call confirms). */
function callbackState (body: any): UpstreamState | undefined {
  if (body?.status === 'OK') {
    if (body.payload === null || body.payload === undefined) return undefined // payload_error: too large to send; read the result
    return successState(body.payload)
  }
  if (body?.status === 'ERROR') {
    const text = [typeof body.error === 'string' ? body.error : '', errorText({ status: 0, headers: {}, json: body.payload, text: '' })].filter(Boolean).join(': ')
    if (detailIsPolicy(body.payload?.detail)) return { state: 'failed', reason: text, contentPolicy: true }
    return failure(text || 'fal: request failed')
  }
  return undefined
}
