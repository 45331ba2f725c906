/**
 * The dashboard's only way to the service: the public /v1 API with the session JWT from
 * POST /v1/auth/login (no private back door). Errors arrive in the SPEC.md envelope and are
 * thrown as ApiFailure with its code.
 */
const TOKEN = 'genjobs.session'
const ADMIN = 'genjobs.admin'

export class ApiFailure extends Error {
  constructor (readonly status: number, readonly code: string, message: string, readonly body: any) { super(message) }
}

/** Codes after which the session is useless: the user logs in again. */
const SESSION_ENDED = new Set(['TOKEN_EXPIRED', 'TOKEN_INVALID', 'TOKEN_MALFORMED', 'PASSWORD_CHANGED', 'USER_NOT_FOUND', 'AUTH_REQUIRED'])

let onSessionEnd: () => void = () => {}
export function whenSessionEnds (fn: () => void): void { onSessionEnd = fn }

export const session = {
  get: (): string | null => localStorage.getItem(TOKEN),
  set: (t: string) => localStorage.setItem(TOKEN, t),
  clear: () => localStorage.removeItem(TOKEN),
}
/** The operator token stays in this tab only. */
export const adminToken = {
  get: (): string | null => sessionStorage.getItem(ADMIN),
  set: (t: string) => sessionStorage.setItem(ADMIN, t),
  clear: () => sessionStorage.removeItem(ADMIN),
}

export async function call<T = any> (method: string, path: string, body?: unknown, o: { admin?: boolean; anonymous?: boolean } = {}): Promise<T> {
  const headers: Record<string, string> = { Accept: 'application/json' }
  const token = o.admin ? adminToken.get() : o.anonymous ? null : session.get()
  if (token) headers.Authorization = `Bearer ${token}`
  if (body !== undefined) headers['Content-Type'] = 'application/json'
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  const text = await r.text()
  let data: any = null
  try { data = text ? JSON.parse(text) : null } catch { data = text }
  if (!r.ok) {
    const code = data?.code ?? `HTTP_${r.status}`
    if (!o.admin && !o.anonymous && r.status === 401 && SESSION_ENDED.has(code)) onSessionEnd()
    throw new ApiFailure(r.status, code, data?.message ?? r.statusText, data)
  }
  return data as T
}

export const errorText = (e: unknown): string => e instanceof ApiFailure ? `${e.code}: ${e.message}` : String(e)

export function fmtDate (iso: string | null | undefined): string {
  if (!iso) return '-'
  const d = new Date(iso)
  return d.toISOString().replace('T', ' ').slice(0, 19) + 'Z'
}

/** POST /v1/uploads (SPEC.md 4.14): a local file becomes a URL usable in any generation input. */
export async function upload (file: File, kind: 'image' | 'audio' | 'video'): Promise<{ url: string; kind: string; size: number }> {
  const form = new FormData()
  form.append('kind', kind)
  form.append('file', file, file.name)
  const headers: Record<string, string> = { Accept: 'application/json' }
  const token = session.get()
  if (token) headers.Authorization = `Bearer ${token}`
  const r = await fetch('/v1/uploads', { method: 'POST', headers, body: form })
  const data = await r.json().catch(() => null)
  if (!r.ok) throw new ApiFailure(r.status, data?.code ?? `HTTP_${r.status}`, data?.message ?? r.statusText, data)
  return data
}

/**
 * Follows one job over SSE (a ticket from POST /v1/sse/tickets, since EventSource cannot send
 * the session header): `onStatus` for each status event, `onDone` at the end. Returns a stop function.
 */
export interface StatusEvent { status: string; progress: number; result_url?: string | null; error_message?: string | null }
export function watchJob (id: string, onStatus: (d: StatusEvent) => void, onDone: (status: string) => void): () => void {
  let es: EventSource | null = null
  let stopped = false
  call<{ ticket: string }>('POST', '/v1/sse/tickets', { jobId: id }).then(({ ticket }) => {
    if (stopped) return
    es = new EventSource(`/v1/sse/jobs/${encodeURIComponent(id)}?ticket=${encodeURIComponent(ticket)}`)
    es.addEventListener('status', (ev) => onStatus(JSON.parse((ev as MessageEvent).data)))
    es.addEventListener('done', (ev) => { es?.close(); onDone(JSON.parse((ev as MessageEvent).data).status) })
  }, () => {})
  return () => { stopped = true; es?.close() }
}

/** Copies text; falls back to a hidden textarea where the Clipboard API is not allowed. */
export async function copyText (text: string): Promise<void> {
  try { await navigator.clipboard.writeText(text); return } catch {}
  const el = document.createElement('textarea')
  el.value = text
  document.body.appendChild(el)
  el.select()
  document.execCommand?.('copy')
  el.remove()
}
