/**
 * The one error table (docs/api.md "Errors").
 * It drives the HTTP envelope, the thread protocol (errors cross threads as codes) and the
 * `x-error-codes` table of /v1/openapi.json. test/errors.test.ts fails if a code is missing.
 */
export const ERRORS = {
  VALIDATION_ERROR: { status: 400, message: 'Request failed schema validation' },
  INVALID_PARAM: { status: 400, message: 'Path parameter has the wrong type' },
  INVALID_IDEMPOTENCY_KEY: { status: 400, message: 'Idempotency-Key must be 1-200 characters of A-Z a-z 0-9 _ . -' },
  AUTH_REQUIRED: { status: 401, message: 'Authentication required' },
  INVALID_API_KEY: { status: 401, message: 'API key is malformed, unknown or revoked' },
  KEY_EXPIRED: { status: 401, message: 'API key has expired' },
  TOKEN_MALFORMED: { status: 401, message: 'Bearer token is not a structurally valid JWT' },
  TOKEN_EXPIRED: { status: 401, message: 'Session token has expired' },
  TOKEN_INVALID: { status: 401, message: 'Session token failed verification' },
  USER_NOT_FOUND: { status: 401, message: 'User no longer exists' },
  PASSWORD_CHANGED: { status: 401, message: 'Session token was issued before the last password change' },
  INVALID_TICKET: { status: 401, message: 'SSE ticket is invalid, expired, or bound to a different job' },
  INVALID_CREDENTIALS: { status: 401, message: 'Email or password is wrong' },
  CALLBACK_UNVERIFIED: { status: 401, message: 'Provider callback failed verification; nothing was changed' },
  INSUFFICIENT_CREDITS: { status: 402, message: 'Balance does not cover the cost; nothing was charged' },
  insufficient_scope: { status: 403, message: 'Credential lacks the required scope' },
  upgrade_required: { status: 403, message: 'This feature needs a paid plan' },
  ACCOUNT_BANNED: { status: 403, message: 'Account is suspended' },
  NOT_ELIGIBLE: { status: 403, message: 'Account cannot perform this action' },
  CONTENT_POLICY_VIOLATION: { status: 403, message: 'Prompt or input media failed moderation' },
  JOB_NOT_FOUND: { status: 404, message: 'No job with that id belongs to the caller' },
  KEY_NOT_FOUND: { status: 404, message: 'No such API key, or it is already revoked' },
  WEBHOOK_NOT_FOUND: { status: 404, message: 'No webhook with that id belongs to the caller' },
  NOT_FOUND: { status: 404, message: 'Not found' },
  KEY_LIMIT_REACHED: { status: 409, message: 'Maximum number of active API keys reached' },
  KEY_REVOKED: { status: 409, message: 'Key is revoked and cannot be rotated' },
  WEBHOOK_LIMIT_REACHED: { status: 409, message: 'Maximum number of active webhooks reached' },
  CANNOT_CANCEL: { status: 409, message: 'Only queued jobs can be cancelled' },
  IDEMPOTENCY_CONFLICT: { status: 409, message: 'Idempotency-Key was already used with a different request body' },
  CONFLICT: { status: 409, message: 'Resource already exists' },
  PAYLOAD_TOO_LARGE: { status: 413, message: 'Payload too large' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, message: 'Unsupported media type' },
  UNSUPPORTED_OPTION: { status: 422, message: 'Option not supported' },
  RATE_LIMIT_EXCEEDED: { status: 429, message: 'Rate limit exceeded' },
  concurrency_limit_reached: { status: 429, message: 'Too many jobs in flight for this key' },
  TOO_MANY_STREAMS: { status: 429, message: 'Too many SSE streams open for this account' },
  INTERNAL_ERROR: { status: 500, message: 'Unexpected error; safe to retry with the same Idempotency-Key' },
  GENERATION_FAILED: { status: 500, message: 'Generation failed' },
  EXTEND_FAILED: { status: 500, message: 'Video extension failed' },
  PROVIDER_ERROR: { status: 502, message: 'Upstream provider temporarily unavailable' },
  SERVICE_UNAVAILABLE: { status: 503, message: 'Service temporarily unavailable' },
  GATEWAY_TIMEOUT: { status: 504, message: 'Generation service did not respond; poll GET /jobs/{id} instead of resubmitting' },
  SKIPPED: { status: 0, message: 'Not submitted because an earlier item failed with INSUFFICIENT_CREDITS' },
} as const satisfies Record<string, { status: number; message: string }>

export type ErrorCode = keyof typeof ERRORS

/**
 * Retry-After (seconds) for 429s that have no window to measure: a job in flight usually takes
 * longer than this, so a client that honours it polls the cap about once per job duration
 * fraction; a stream slot frees as soon as another stream closes.
 */
const RETRY_AFTER_DEFAULT: Partial<Record<ErrorCode, number>> = { concurrency_limit_reached: 10, TOO_MANY_STREAMS: 5 }

/** Extra envelope fields some codes carry (`param`, `details`, `required_scope`, `pricing_url`, `reason`...). */
export type ErrorExtra = { details?: unknown; param?: string; [k: string]: unknown }

/** An error that maps onto the docs/api.md "Errors" envelope. Thrown anywhere; rendered by the front end. */
/** The body of every error answer (docs/api.md "Errors"): the code's fields, then its details. */
export interface ErrorEnvelope { error: true; code: ErrorCode; message: string; [detail: string]: unknown }

export class ApiError extends Error {
  readonly code: ErrorCode
  readonly status: number
  readonly extra: ErrorExtra | undefined
  /** Extra response headers (e.g. Retry-After). */
  headers: Record<string, string> | undefined
  constructor (code: ErrorCode, message?: string, extra?: ErrorExtra) {
    super(message ?? ERRORS[code].message)
    this.code = code
    this.status = ERRORS[code].status
    this.extra = extra
    // docs/api.md "Errors": every 429 carries Retry-After. Every 429, whatever raised it (the rate window, the
    // concurrency cap on a shard thread, the SSE stream cap), carries the header and the same
    // number as `retry_after` in the body: set here, where every ApiError is made.
    if (this.status === 429) {
      const given = extra?.retry_after
      const seconds = typeof given === 'number' && Number.isFinite(given) && given >= 0 ? Math.ceil(given) : RETRY_AFTER_DEFAULT[code] ?? 1
      this.extra = { ...extra, retry_after: seconds }
      this.headers = { 'Retry-After': String(seconds) }
    }
  }

  /** The docs/api.md "Errors" envelope. */
  toJSON (): ErrorEnvelope {
    return { error: true, code: this.code, message: this.message, ...this.extra }
  }
}

export function isErrorCode (code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.prototype.hasOwnProperty.call(ERRORS, code)
}

/** Rebuilds an ApiError from its wire form (thread replies, stored results). */
export function errorFromWire (code: string, message: string, extra?: ErrorExtra): ApiError {
  return new ApiError(isErrorCode(code) ? code : 'INTERNAL_ERROR', message, extra)
}

/**
 * An account whose email is not verified creates no job, batch or upload, whatever its
 * credential (docs/operations.md "Hostile input"): 403 NOT_ELIGIBLE, reason `email_unverified`.
 */
export function emailUnverified (what = 'create jobs or uploads'): ApiError {
  return new ApiError('NOT_ELIGIBLE', `This account's email is not verified yet, so it cannot ${what}; once it is verified, try again`, { reason: 'email_unverified', reasons: ['email_unverified'] })
}
