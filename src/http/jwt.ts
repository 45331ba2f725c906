import { createHmac, timingSafeEqual } from 'node:crypto'
import { ApiError } from '../errors.js'

/** Session JWT claims (docs/decisions.md "Foundation", "Session JWTs": HS256, sub = user id, iat). */
export interface SessionClaims {
  sub: string
  iat: number
  exp: number
  /** Issue time in milliseconds: compared with password_changed_at (PASSWORD_CHANGED). */
  iat_ms: number
  typ: 'session'
}

export const SESSION_TTL_SECONDS = 24 * 3600

const HEADER = Buffer.from(JSON.stringify({ alg: 'HS256', typ: 'JWT' })).toString('base64url')

function mac (secret: string, data: string): Buffer {
  return createHmac('sha256', secret).update(data).digest()
}

export function signSession (secret: string, userId: number, now = Date.now()): { token: string; expires_in: number } {
  const claims: SessionClaims = { sub: String(userId), iat: Math.floor(now / 1000), exp: Math.floor(now / 1000) + SESSION_TTL_SECONDS, iat_ms: now, typ: 'session' }
  const body = `${HEADER}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`
  return { token: `${body}.${mac(secret, body).toString('base64url')}`, expires_in: SESSION_TTL_SECONDS }
}

const B64URL = /^[A-Za-z0-9_-]+$/

function decodeJsonPart (part: string): Record<string, unknown> | null {
  try {
    const v = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'))
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : null
  } catch { return null }
}

/**
 * Verifies a session JWT (docs/api.md "Accounts, sessions and keys"): structure -> TOKEN_MALFORMED; algorithm, signature or
 * claim types -> TOKEN_INVALID; exp in the past -> TOKEN_EXPIRED.
 */
export function verifySession (secret: string, token: string, now = Date.now()): SessionClaims {
  const parts = token.split('.')
  // An empty signature is structurally valid (an unsecured `alg: none` JWT, RFC 7519 6.1):
  // it is refused below as TOKEN_INVALID, not as malformed.
  if (parts.length !== 3 || !B64URL.test(parts[0]) || !B64URL.test(parts[1]) || (parts[2] !== '' && !B64URL.test(parts[2]))) {
    throw new ApiError('TOKEN_MALFORMED')
  }
  const header = decodeJsonPart(parts[0])
  const claims = decodeJsonPart(parts[1])
  if (header === null || claims === null) throw new ApiError('TOKEN_MALFORMED')
  if (header.alg !== 'HS256') throw new ApiError('TOKEN_INVALID', 'Session token algorithm must be HS256')
  const expected = mac(secret, `${parts[0]}.${parts[1]}`)
  const given = Buffer.from(parts[2], 'base64url')
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw new ApiError('TOKEN_INVALID')
  if (typeof claims.sub !== 'string' || !/^[1-9][0-9]{0,15}$/.test(claims.sub) ||
      typeof claims.exp !== 'number' || typeof claims.iat !== 'number' || typeof claims.iat_ms !== 'number' || claims.typ !== 'session') {
    throw new ApiError('TOKEN_INVALID', 'Session token claims are invalid')
  }
  if (claims.exp * 1000 <= now) throw new ApiError('TOKEN_EXPIRED')
  return claims as unknown as SessionClaims
}
