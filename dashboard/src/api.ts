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
