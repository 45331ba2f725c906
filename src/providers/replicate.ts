/**
 * Replicate predictions API adapter (docs/providers.md "Replicate").
 * - submit: `POST {api}/v1/models/{owner}/{name}/predictions` for a model, or
 *   `POST {api}/v1/predictions` with `version` when the route's model is a version (contains ':'
 *   or is a 64-hex id); `Authorization: Bearer <REPLICATE_API_TOKEN>`; body
 *   `{input, webhook, webhook_events_filter: ["completed"]}`.
 * - status: `GET {api}/v1/predictions/{id}` (starting, processing, succeeded, failed, canceled;
 *   `aborted` = ended before it started); `output` is a URL or an array of URLs.
 * - cancel: `POST {api}/v1/predictions/{id}/cancel`.
 * - lookup of a lost submission: `GET {api}/v1/predictions?created_after=` (newest first, `next`
 *   cursor URL). A prediction whose `webhook` carries our job id (`?job=`) is ours; where the
 *   prediction shows no webhook, one of the same model with the same input is (docs/providers.md
 *   "No duplicate upstream jobs"). Replicate keeps no other metadata of ours.
 * - callbacks: Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) with
 *   REPLICATE_WEBHOOK_SECRET (`whsec_<base64>`), tolerance 300 s: HMAC-SHA256 of
 *   `<id>.<timestamp>.<raw body>`, base64, any `v1,` entry of the header matching. Verified here
 *   with node:crypto over the raw bytes, after the header and timestamp checks (a forged body
 *   costs no hashing unless its headers are well-formed and current); the `standardwebhooks`
 *   package hashes in JavaScript (~20 ms a MB). The body (the prediction) is signed, so it gives
 *   the state.
 */
import { createHmac, timingSafeEqual } from 'node:crypto'
import { looksLikeContentPolicy, notAVerdict, progressFromLogs, raiseForStatus, trimBase, upstreamRequest, type HttpSettings } from './http.js'
import { jobIdOfCallbackUrl, sameInput, UpstreamRefused, UpstreamUnavailable, type RawCallback, type UpstreamAdapter, type UpstreamHandle, type UpstreamLookup, type UpstreamRequest, type UpstreamState, type VerifiedCallback } from './upstream.js'
import type { ProviderJson } from '../net/json-client.js'

export interface ReplicateConfig extends HttpSettings {
  /** REPLICATE_API_TOKEN. */
  token: string
  /** REPLICATE_API_URL (default https://api.replicate.com). */
  apiUrl?: string
  /** REPLICATE_WEBHOOK_SECRET (`whsec_<base64>`); without it every callback is refused (polling still works). */
  webhookSecret?: string
}

/** Standard Webhooks' tolerance for the signed timestamp, either way. */
const WEBHOOK_TOLERANCE_S = 300
/** Pages of the prediction list read for one lookup (100 predictions each). */
const LOOKUP_PAGES = 10

export class ReplicateAdapter implements UpstreamAdapter {
  readonly name = 'replicate' as const
  readonly lookup = 'list' as const
  private readonly base: string
  /** The webhook signing key (the base64 after `whsec_`, decoded); null without a secret. */
  private readonly webhookKey: Buffer | null

  constructor (private readonly cfg: ReplicateConfig) {
    this.base = trimBase(cfg.apiUrl ?? 'https://api.replicate.com')
    this.webhookKey = cfg.webhookSecret ? Buffer.from(cfg.webhookSecret.replace(/^whsec_/, ''), 'base64') : null
    if (this.webhookKey !== null && this.webhookKey.length === 0) throw new Error('REPLICATE_WEBHOOK_SECRET is empty after its whsec_ prefix')
  }

  private get auth () { return { authorization: `Bearer ${this.cfg.token}` } }

  async submit (req: UpstreamRequest, signal?: AbortSignal): Promise<UpstreamHandle> {
    const body: Record<string, unknown> = { input: req.input }
    if (req.callbackUrl) { body.webhook = req.callbackUrl; body.webhook_events_filter = ['completed'] }
    const version = versionOf(req.model)
    let url: string
    if (version !== null) {
      url = `${this.base}/v1/predictions`
      body.version = version
    } else {
      const [owner, name, ...rest] = req.model.split('/')
      if (!owner || !name || rest.length > 0) throw new UpstreamRefused(`replicate: model "${req.model}" is neither owner/name nor a version`)
      url = `${this.base}/v1/models/${encodeURIComponent(owner)}/${encodeURIComponent(name)}/predictions`
    }
    const res = raiseForStatus('replicate', await upstreamRequest('replicate', 'POST', url, { ...this.cfg, headers: this.auth, json: body, signal }))
    const id = res.json?.id
    if (typeof id !== 'string' || id === '') throw new UpstreamUnavailable(`replicate: creation answered ${res.status} without an id`, res.status)
    return { id, model: req.model }
  }

  async status (handle: UpstreamHandle, signal?: AbortSignal): Promise<UpstreamState> {
    const res = await upstreamRequest('replicate', 'GET', `${this.base}/v1/predictions/${encodeURIComponent(handle.id)}`, { ...this.cfg, headers: this.auth, signal })
    if (res.status < 200 || res.status >= 300) throw notAVerdict('replicate status', res)
    return predictionState(res.json)
  }

  async cancel (handle: UpstreamHandle, signal?: AbortSignal): Promise<boolean> {
    const res = await upstreamRequest('replicate', 'POST', `${this.base}/v1/predictions/${encodeURIComponent(handle.id)}/cancel`, { ...this.cfg, headers: this.auth, signal })
    if (res.status >= 200 && res.status < 300) {
      // Replicate answers the prediction; one that already ended otherwise was not canceled.
      const s = res.json?.status
      return s !== 'succeeded' && s !== 'failed' && s !== 'aborted'
    }
    if (res.status === 408 || res.status === 429 || res.status >= 500) raiseForStatus('replicate', res)
    return false
  }

  /**
   * Predictions created since `q.since` that are this submission's, oldest first (see the
   * header): those whose webhook names our job; only when none does, those without a webhook
   * of the same model and input (a prediction made without one, or a list that does not echo it).
   */
  async find (q: UpstreamLookup, signal?: AbortSignal): Promise<UpstreamHandle[]> {
    const version = versionOf(q.model)
    const byWebhook = (p: ProviderJson): boolean => typeof p?.webhook === 'string' && p.webhook !== '' && jobIdOfCallbackUrl(p.webhook) === q.jobId
    const byInput = (p: ProviderJson): boolean => (typeof p?.webhook !== 'string' || p.webhook === '') &&
      (version !== null ? p?.version === version : p?.model === q.model) && sameInput(p?.input, q.input)
    const pick = (list: ProviderJson[]): UpstreamHandle[] => {
      const ok = list.filter(p => typeof p?.id === 'string' && p.id !== '')
      const hooked = ok.filter(byWebhook)
      return (hooked.length > 0 ? hooked : ok.filter(byInput)).map(p => ({ id: p.id as string, model: q.model }))
    }
    if (q.candidate) {
      const res = await upstreamRequest('replicate', 'GET', `${this.base}/v1/predictions/${encodeURIComponent(q.candidate)}`, { ...this.cfg, headers: this.auth, signal })
      if (res.status === 404) return []
      if (res.status < 200 || res.status >= 300) throw notAVerdict('replicate prediction', res)
      return pick([res.json])
    }
    const seen: ProviderJson[] = []
    let url: string | null = `${this.base}/v1/predictions?created_after=${encodeURIComponent(q.since.toISOString())}`
    for (let page = 0; page < LOOKUP_PAGES && url !== null; page++) {
      const res = await upstreamRequest('replicate', 'GET', url, { ...this.cfg, headers: this.auth, signal })
      if (res.status < 200 || res.status >= 300) throw notAVerdict('replicate prediction list', res)
      if (!Array.isArray(res.json?.results)) throw new UpstreamUnavailable('replicate prediction list: answer without results', res.status)
      seen.push(...res.json.results)
      // Only a `next` on our own API host is followed (the token goes with it).
      const next: unknown = res.json.next
      url = typeof next === 'string' && next.startsWith(`${this.base}/`) ? next : null
    }
    if (url !== null) throw new UpstreamUnavailable(`replicate prediction list: more than ${LOOKUP_PAGES * 100} predictions since ${q.since.toISOString()}`)
    // The list is newest first.
    return pick(seen.reverse())
  }

  async verifyCallback (req: RawCallback): Promise<VerifiedCallback> {
    if (!this.webhookKey) return { ok: false, reason: 'REPLICATE_WEBHOOK_SECRET is not configured' }
    const id = req.headers['webhook-id']
    const ts = req.headers['webhook-timestamp']
    const sig = req.headers['webhook-signature']
    if (!id || !ts || !sig) return { ok: false, reason: 'standard webhooks: Missing required headers' }
    if (!/^\d{1,12}$/.test(ts)) return { ok: false, reason: 'standard webhooks: Invalid Signature Headers' }
    const age = Math.floor(Date.now() / 1000) - Number(ts)
    if (age > WEBHOOK_TOLERANCE_S) return { ok: false, reason: 'standard webhooks: Message timestamp too old' }
    if (age < -WEBHOOK_TOLERANCE_S) return { ok: false, reason: 'standard webhooks: Message timestamp too new' }
    // Compared as the base64 text, as the reference libraries do (a truncated one never matches).
    const given: Buffer[] = []
    for (const part of sig.split(' ')) if (part.startsWith('v1,') && part.length === 47) given.push(Buffer.from(part.slice(3), 'latin1'))
    if (given.length === 0) return { ok: false, reason: 'standard webhooks: No matching signature found' }
    const expected = Buffer.from(createHmac('sha256', this.webhookKey).update(`${id}.${ts}.`).update(req.body).digest('base64'), 'latin1')
    if (!given.some(g => timingSafeEqual(g, expected))) return { ok: false, reason: 'standard webhooks: No matching signature found' }
    let body: ProviderJson
    try { body = req.body.length === 0 ? undefined : JSON.parse(req.body.toString('utf8')) } catch { return { ok: false, reason: 'verified body is not JSON' } }
    const prediction = body?.id
    if (typeof prediction !== 'string' || prediction === '') return { ok: false, reason: 'verified body has no prediction id' }
    return { ok: true, upstreamId: prediction, state: predictionState(body) }
  }
}

/** The version id of a route model `owner/name:version` or a bare 64-hex id; null for `owner/name`. */
export function versionOf (model: string): string | null {
  if (/^[0-9a-f]{64}$/i.test(model)) return model
  const i = model.indexOf(':')
  return i >= 0 ? model.slice(i + 1) : null
}

/** Result URLs of a prediction's `output`: a URL, an array of URLs, or (some models) an object of them. */
export function replicateOutputs (output: unknown): string[] {
  const out: string[] = []
  const add = (v: unknown) => { if (typeof v === 'string' && /^https?:\/\//i.test(v) && !out.includes(v)) out.push(v) }
  if (Array.isArray(output)) output.forEach(add)
  else if (output && typeof output === 'object') Object.values(output).forEach(v => Array.isArray(v) ? v.forEach(add) : add(v))
  else add(output)
  return out
}

function predictionState (p: ProviderJson): UpstreamState {
  switch (p?.status) {
    case 'starting': return { state: 'queued' }
    case 'processing': {
      const progress = progressFromLogs(p.logs)
      return progress === undefined ? { state: 'running' } : { state: 'running', progress }
    }
    case 'succeeded': {
      const outputs = replicateOutputs(p.output)
      return outputs.length > 0 ? { state: 'succeeded', outputs } : { state: 'failed', reason: 'replicate: output has no media URL', contentPolicy: false }
    }
    case 'failed': {
      const reason = typeof p.error === 'string' && p.error !== '' ? p.error : 'replicate: prediction failed'
      return { state: 'failed', reason: reason.slice(0, 500), contentPolicy: looksLikeContentPolicy(reason) }
    }
    case 'canceled': return { state: 'canceled' }
    // Terminated before it started (a deadline on Replicate's side): definitive, not ours.
    case 'aborted': return { state: 'failed', reason: 'replicate: prediction aborted before it started', contentPolicy: false }
    default: return { state: 'running' } // unknown upstream status: non-terminal (upstream.ts)
  }
}
