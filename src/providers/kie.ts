/**
 * Kie.ai market task API adapter (docs/providers.md "Kie.ai").
 * - submit: `POST {api}/api/v1/jobs/createTask {model, input, callBackUrl}` with
 *   `Authorization: Bearer <KIE_API_KEY>`. Kie answers HTTP 200 with the outcome in the body's
 *   `code`: 200 = accepted (`data.taskId`); 429 (rate limit), 455 (maintenance) and 5xx codes
 *   other than 501 are indefinite (UpstreamUnavailable); every other code (401 auth, 402
 *   credits, 404, 422 validation, 433 sub-key limit, 501 generation failed, 505 disabled) is a
 *   refusal. A real HTTP error status is mapped as usual.
 * - status: `GET {api}/api/v1/jobs/recordInfo?taskId=` (waiting, queuing, generating, success,
 *   fail); `resultJson` is a JSON string with `resultUrls`; `failCode` / `failMsg` on failure.
 * - cancel: Kie has no cancel API: resolves false.
 * - callbacks: X-Webhook-Timestamp and X-Webhook-Signature = base64(HMAC-SHA256(
 *   `taskId.timestamp`, KIE_WEBHOOK_HMAC_KEY)), the task id read from the body as Kie's
 *   verification doc does: `data.task_id` in its code sample, `data.taskId` in its callback
 *   examples, so both are read (and a top-level `taskId`/`task_id`). The MAC does not cover the
 *   body, so a verified callback only names the task (no state): the caller confirms with `status`.
 * - lookup of a lost submission: Kie lists no tasks, so only a task a callback names can be
 *   checked: recordInfo's `param` (the creation request as Kie stored it) must carry our
 *   callBackUrl, whose query names our job (docs/providers.md "No duplicate upstream jobs").
 */
import { createHmac, timingSafeEqual } from 'node:crypto'
import { looksLikeContentPolicy, notAVerdict, parseRetryAfter, raiseForStatus, trimBase, upstreamRequest, type HttpSettings } from './http.js'
import { jobIdOfCallbackUrl, UpstreamRefused, UpstreamUnavailable, type RawCallback, type UpstreamAdapter, type UpstreamHandle, type UpstreamLookup, type UpstreamRequest, type UpstreamState, type VerifiedCallback } from './upstream.js'
import type { ProviderJson } from '../net/json-client.js'

export interface KieConfig extends HttpSettings {
  /** KIE_API_KEY. */
  apiKey: string
  /** KIE_API_URL (default https://api.kie.ai). */
  apiUrl?: string
  /** KIE_WEBHOOK_HMAC_KEY; without it every callback is refused (polling still works). */
  hmacKey?: string
  /** Callback timestamp tolerance in seconds (default 300). */
  toleranceS?: number
  now?: () => number
}

/** Body codes that mean "try again later" (Kie's code table: 429 rate limited, 455 maintenance, 500 server error). */
const INDEFINITE_CODES = new Set([429, 455, 500, 502, 503, 504])

export class KieAdapter implements UpstreamAdapter {
  readonly name = 'kie' as const
  readonly lookup = 'callback' as const
  private readonly base: string
  private readonly toleranceS: number
  private readonly now: () => number

  constructor (private readonly cfg: KieConfig) {
    this.base = trimBase(cfg.apiUrl ?? 'https://api.kie.ai')
    this.toleranceS = cfg.toleranceS ?? 300
    this.now = cfg.now ?? Date.now
  }

  private get auth () { return { authorization: `Bearer ${this.cfg.apiKey}` } }

  async submit (req: UpstreamRequest, signal?: AbortSignal): Promise<UpstreamHandle> {
    const body: Record<string, unknown> = { model: req.model, input: req.input }
    if (req.callbackUrl) body.callBackUrl = req.callbackUrl
    const res = raiseForStatus('kie', await upstreamRequest('kie', 'POST', `${this.base}/api/v1/jobs/createTask`, { ...this.cfg, headers: this.auth, json: body, signal }))
    const code = Number(res.json?.code)
    const msg = String(res.json?.msg ?? res.json?.message ?? '')
    if (!Number.isFinite(code)) throw new UpstreamUnavailable(`kie: createTask answered ${res.status} without a code`, res.status)
    if (code !== 200) {
      // Kie answered and made no task: sending again cannot duplicate one (`notCreated`).
      if (INDEFINITE_CODES.has(code)) throw new UpstreamUnavailable(`kie: code ${code}: ${msg}`, code, parseRetryAfter(res.headers['retry-after']), true)
      throw new UpstreamRefused(`kie: code ${code}: ${msg}`, code)
    }
    const taskId = res.json?.data?.taskId
    if (typeof taskId !== 'string' || taskId === '') throw new UpstreamUnavailable('kie: createTask accepted without a taskId', res.status)
    return { id: taskId, model: req.model }
  }

  async status (handle: UpstreamHandle, signal?: AbortSignal): Promise<UpstreamState> {
    const res = await upstreamRequest('kie', 'GET', `${this.base}/api/v1/jobs/recordInfo?taskId=${encodeURIComponent(handle.id)}`, { ...this.cfg, headers: this.auth, signal })
    if (res.status < 200 || res.status >= 300) throw notAVerdict('kie recordInfo', res)
    const code = Number(res.json?.code)
    if (code !== 200 || !res.json?.data) throw new UpstreamUnavailable(`kie recordInfo: code ${res.json?.code}: ${res.json?.msg ?? res.json?.message ?? res.text.slice(0, 200)}`, Number.isFinite(code) ? code : res.status)
    return recordState(res.json.data)
  }

  /** Kie has no cancel API. */
  async cancel (_handle: UpstreamHandle): Promise<boolean> {
    return false
  }

  /**
   * Kie has no task list: without a candidate nothing can be found ([]). A candidate (a task a
   * verified callback named) is ours when recordInfo's `param` holds our callBackUrl for this job.
   */
  async find (q: UpstreamLookup, signal?: AbortSignal): Promise<UpstreamHandle[]> {
    if (!q.candidate) return []
    const res = await upstreamRequest('kie', 'GET', `${this.base}/api/v1/jobs/recordInfo?taskId=${encodeURIComponent(q.candidate)}`, { ...this.cfg, headers: this.auth, signal })
    if (res.status < 200 || res.status >= 300) throw notAVerdict('kie recordInfo', res)
    const code = Number(res.json?.code)
    if (code !== 200 || !res.json?.data) return []
    let param: ProviderJson = res.json.data.param
    if (typeof param === 'string') { try { param = JSON.parse(param) } catch { param = null } }
    if (jobIdOfCallbackUrl(param?.callBackUrl) !== q.jobId) return []
    if (typeof param?.model === 'string' && param.model !== q.model) return []
    return [{ id: q.candidate, model: q.model }]
  }

  async verifyCallback (req: RawCallback): Promise<VerifiedCallback> {
    if (!this.cfg.hmacKey) return { ok: false, reason: 'KIE_WEBHOOK_HMAC_KEY is not configured' }
    const ts = req.headers['x-webhook-timestamp']
    const sig = req.headers['x-webhook-signature']
    if (!ts || !sig) return { ok: false, reason: 'missing X-Webhook-Timestamp or X-Webhook-Signature' }
    if (!/^\d+$/.test(ts)) return { ok: false, reason: 'bad X-Webhook-Timestamp' }
    if (Math.abs(Math.floor(this.now() / 1000) - Number(ts)) > this.toleranceS) return { ok: false, reason: `timestamp outside ${this.toleranceS} s` }
    let body: ProviderJson
    try { body = JSON.parse(req.body.toString('utf8')) } catch { return { ok: false, reason: 'body is not JSON' } }
    const taskId = taskIdOf(body)
    if (taskId === null) return { ok: false, reason: 'body has no taskId or task_id' }
    const expected = createHmac('sha256', this.cfg.hmacKey).update(`${taskId}.${ts}`).digest()
    const given = Buffer.from(sig, 'base64')
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return { ok: false, reason: 'signature does not match' }
    // The MAC covers taskId and timestamp only: the body's state is not trustworthy, confirm with status.
    return { ok: true, upstreamId: taskId }
  }
}

/**
 * The task id of a callback body: `data.taskId` (Kie's market and Veo callbacks), `data.task_id`
 * (the verification doc's code sample, Runway callbacks), or the same at the top level.
 */
export function taskIdOf (body: ProviderJson): string | null {
  for (const v of [body?.data?.taskId, body?.data?.task_id, body?.taskId, body?.task_id]) {
    if (typeof v === 'string' && v !== '') return v
  }
  return null
}

/** Result URLs from `resultJson` (a JSON string, or already an object). */
export function kieOutputs (resultJson: unknown): string[] {
  let r: ProviderJson = resultJson
  if (typeof r === 'string') { try { r = JSON.parse(r) } catch { return [] } }
  const urls = Array.isArray(r?.resultUrls) ? r.resultUrls : []
  return urls.filter((u: unknown): u is string => typeof u === 'string' && /^https?:\/\//i.test(u))
}

function recordState (d: ProviderJson): UpstreamState {
  switch (d?.state) {
    case 'waiting':
    case 'queuing': return { state: 'queued' }
    case 'generating': {
      const p = Number(d.progress)
      if (d.progress === undefined || d.progress === null || d.progress === '' || !Number.isFinite(p)) return { state: 'running' }
      return { state: 'running', progress: Math.max(0, Math.min(100, p <= 1 ? Math.round(p * 100) : Math.round(p))) }
    }
    case 'success': {
      const outputs = kieOutputs(d.resultJson)
      return outputs.length > 0 ? { state: 'succeeded', outputs } : { state: 'failed', reason: 'kie: resultJson has no resultUrls', contentPolicy: false }
    }
    case 'fail': {
      const code = d.failCode === undefined || d.failCode === null ? '' : String(d.failCode)
      const msg = typeof d.failMsg === 'string' ? d.failMsg : ''
      const reason = [code && `failCode ${code}`, msg].filter(Boolean).join(': ') || 'kie: task failed'
      return { state: 'failed', reason: reason.slice(0, 500), contentPolicy: looksLikeContentPolicy(msg) || looksLikeContentPolicy(code) }
    }
    default: return { state: 'running' } // unknown upstream state: non-terminal (upstream.ts)
  }
}
