import { availableParallelism } from 'node:os'
import { resolve } from 'node:path'

/** Per-tier limits (SPEC.md section 8, DESIGN.md section 7; TIER_LIMITS overrides any subset). */
export interface TierLimit { rpm: number; max_concurrent: number; max_streams: number }
export type TierLimits = Record<'free' | 'pro' | 'enterprise' | 'session', TierLimit>

export const DEFAULT_TIER_LIMITS: TierLimits = {
  free: { rpm: 10, max_concurrent: 3, max_streams: 5 },
  pro: { rpm: 30, max_concurrent: 10, max_streams: 50 },
  enterprise: { rpm: 100, max_concurrent: 50, max_streams: 500 },
  // Dashboard sessions: 100 requests per minute per user (SPEC.md 8); concurrency and streams
  // follow the account's own tier at use time, these are the ceilings for a session caller.
  session: { rpm: 100, max_concurrent: 10, max_streams: 50 },
}

/** Service configuration, read once from the environment (DESIGN.md section 7). */
export interface Config {
  port: number
  host: string
  publicBaseUrl: string
  databaseUrl: string | undefined
  redisUrl: string | undefined
  shards: number
  adminToken: string | undefined
  jwtSecret: string | undefined
  simSpeed: number
  moderationTerms: string[]
  webhookAllowlist: string[]
  logLevel: string
  dataDir: string
  tierLimits: TierLimits
  sseHeartbeatMs: number
  submitTimeoutMs: number
  /** Days raw request-metering rows are kept (rollups are kept forever). */
  meteringRetentionDays: number
}

function list (v: string | undefined): string[] {
  return (v ?? '').split(',').map(s => s.trim()).filter(Boolean)
}

function int (name: string, v: string | undefined, dflt: number, min = 0): number {
  if (v === undefined || v === '') return dflt
  const n = Number(v)
  if (!Number.isFinite(n) || n < min) throw new Error(`${name} must be a number >= ${min}, got ${JSON.stringify(v)}`)
  return n
}

export function parseTierLimits (raw: string | undefined): TierLimits {
  const out: TierLimits = structuredClone(DEFAULT_TIER_LIMITS)
  if (!raw) return out
  let parsed: unknown
  try { parsed = JSON.parse(raw) } catch { throw new Error('TIER_LIMITS must be JSON') }
  if (!parsed || typeof parsed !== 'object') throw new Error('TIER_LIMITS must be a JSON object')
  for (const [tier, v] of Object.entries(parsed as Record<string, unknown>)) {
    if (!(tier in out)) throw new Error(`TIER_LIMITS: unknown tier ${tier}`)
    if (!v || typeof v !== 'object') throw new Error(`TIER_LIMITS.${tier} must be an object`)
    for (const [k, n] of Object.entries(v as Record<string, unknown>)) {
      if (!['rpm', 'max_concurrent', 'max_streams'].includes(k)) throw new Error(`TIER_LIMITS.${tier}: unknown key ${k}`)
      if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) throw new Error(`TIER_LIMITS.${tier}.${k} must be a non-negative integer`)
      ;(out[tier as keyof TierLimits] as unknown as Record<string, number>)[k] = n
    }
  }
  return out
}

export function loadConfig (env: NodeJS.ProcessEnv = process.env, overrides: Partial<Config> = {}): Config {
  const port = int('PORT', env.PORT, 8080)
  const cfg: Config = {
    port,
    host: env.HOST || '0.0.0.0',
    publicBaseUrl: (env.PUBLIC_BASE_URL || `http://localhost:${port}`).replace(/\/+$/, ''),
    databaseUrl: env.DATABASE_URL || undefined,
    redisUrl: env.REDIS_URL || undefined,
    shards: int('SHARDS', env.SHARDS, Math.max(1, availableParallelism()), 1),
    adminToken: env.ADMIN_TOKEN || undefined,
    jwtSecret: env.JWT_SECRET || undefined,
    simSpeed: int('SIM_SPEED', env.SIM_SPEED, 1, 0.001),
    moderationTerms: list(env.MODERATION_TERMS).map(s => s.toLowerCase()),
    webhookAllowlist: list(env.WEBHOOK_ALLOWLIST).map(s => s.toLowerCase()),
    logLevel: env.LOG_LEVEL || 'info',
    dataDir: resolve(env.DATA_DIR || './data'),
    tierLimits: parseTierLimits(env.TIER_LIMITS),
    sseHeartbeatMs: int('SSE_HEARTBEAT_MS', env.SSE_HEARTBEAT_MS, 15000, 10),
    submitTimeoutMs: int('SUBMIT_TIMEOUT_MS', env.SUBMIT_TIMEOUT_MS, 15000, 1),
    meteringRetentionDays: int('METERING_RETENTION_DAYS', env.METERING_RETENTION_DAYS, 30, 1),
    ...overrides,
  }
  return cfg
}
