import { availableParallelism } from 'node:os'
import { resolve } from 'node:path'
import { loadRouting } from './providers/routing.js'

/**
 * A configuration mistake (env or routing file): src/main.ts prints its message as one line
 * and exits 1, before anything starts (docs/operations.md "Configuration"). The message names the
 * variable or file, the path inside it and the allowed values.
 */
export class ConfigError extends Error {
  override name = 'ConfigError'
}

/** Per-tier limits (docs/api.md "Accounts, sessions and keys", docs/operations.md "Configuration"; TIER_LIMITS overrides any subset). */
export interface TierLimit { rpm: number; max_concurrent: number; max_streams: number }
export type TierLimits = Record<'free' | 'pro' | 'enterprise' | 'session', TierLimit>

export const DEFAULT_TIER_LIMITS: TierLimits = {
  free: { rpm: 10, max_concurrent: 3, max_streams: 5 },
  pro: { rpm: 30, max_concurrent: 10, max_streams: 50 },
  enterprise: { rpm: 100, max_concurrent: 50, max_streams: 500 },
  // Dashboard sessions: 100 requests per minute per user (docs/decisions.md "Foundation", "Sessions may call the API routes too"); concurrency and streams
  // follow the account's own tier at use time, these are the ceilings for a session caller.
  session: { rpm: 100, max_concurrent: 10, max_streams: 50 },
}

/** Service configuration, read once from the environment (docs/operations.md "Configuration"). */
export interface Config {
  port: number
  host: string
  publicBaseUrl: string
  databaseUrl: string | undefined
  redisUrl: string | undefined
  /**
   * SHARDS: actor shard worker threads; default one per core the front ends leave, at least 1
   * (docs/decisions.md "One shard per core left by the front ends").
   */
  shards: number
  /** FRONTENDS: uWS front-end threads sharing the listening port (docs/decisions.md "Front-end threads"); default 1. */
  frontends: number
  adminToken: string | undefined
  /** METRICS_TOKEN: a Bearer token for GET /metrics only (ADMIN_TOKEN is accepted too). */
  metricsToken: string | undefined
  jwtSecret: string | undefined
  simSpeed: number
  moderationTerms: string[]
  webhookAllowlist: string[]
  /**
   * WEBHOOK_WORKERS: delivery worker threads at most (one always runs, more start while the
   * backlog is deep); default half the cores, at least 1 (docs/decisions.md "Delivery workers").
   */
  webhookWorkers: number
  /** WEBHOOK_RETRY_SCALE: multiplies the webhook retry schedule (docs/api.md "Webhooks"); default 1, tests use 0.001. */
  webhookRetryScale: number
  logLevel: string
  dataDir: string
  tierLimits: TierLimits
  sseHeartbeatMs: number
  submitTimeoutMs: number
  /** Days raw request-metering rows are kept (rollups are kept forever). */
  meteringRetentionDays: number
  /** Namespace of this deployment's Redis keys and channel (REDIS_PREFIX, default genjobs). */
  redisPrefix: string
  /** PROVIDERS_FILE: the routing file (docs/providers.md "Routing"); unset, every model runs on the simulated provider. */
  providersFile: string | undefined
  /** Provider credentials and endpoints (FAL_*, REPLICATE_*, KIE_* env), read by src/providers/routing.ts. */
  providerEnv: Record<string, string>
  /** Largest provider result stored (RESULT_MAX_BYTES, default 2 GiB). */
  resultMaxBytes: number
  /** Budget of one result download (RESULT_TIMEOUT_MS, default 10 min). */
  resultTimeoutMs: number
  /** Content-policy violations before an account is suspended (POLICY_VIOLATION_LIMIT). */
  policyViolationLimit: number
  /** Media storage driver (STORAGE_DRIVER, docs/operations.md "Configuration"): local filesystem or S3-compatible. */
  storageDriver: 'local' | 's3'
  /** S3 settings, used when storageDriver is `s3`. */
  s3: S3Config
  /** DB_STALL_TIMEOUT_MS: a PostgreSQL connection owing an answer and silent this long is cut (503s instead of hangs); 0 = off. */
  dbStallTimeoutMs: number
  /** JOB_CACHE_MB: memory budget of the job read cache (src/jobs/cache.ts). */
  jobCacheMb: number
  /** AUTH_CACHE_MB: memory budget of the credential caches and the in-process login throttle (src/http/auth.ts). */
  authCacheMb: number
  /** ACTOR_IDLE_S: an idle account actor is dropped from its shard after this long (src/shard/eviction.ts). */
  actorIdleS: number
}

/**
 * S3-compatible storage (S3_* env). Credentials left unset fall back to the AWS SDK's default
 * chain (AWS_* env, instance roles). `publicUrl` unset: objects are served by the front end
 * under PUBLIC_BASE_URL/files/<key>, read from the bucket.
 */
export interface S3Config {
  bucket: string | undefined
  region: string
  endpoint: string | undefined
  accessKeyId: string | undefined
  secretAccessKey: string | undefined
  publicUrl: string | undefined
  /** Path-style addressing (`endpoint/bucket/key`): on by default with a custom endpoint (MinIO and friends). */
  forcePathStyle: boolean
}

function list (v: string | undefined): string[] {
  return (v ?? '').split(',').map(s => s.trim()).filter(Boolean)
}

function int (name: string, v: string | undefined, dflt: number, min = 0): number {
  if (v === undefined || v === '') return dflt
  const n = Number(v)
  if (!Number.isFinite(n) || n < min) throw new ConfigError(`${name} must be a number >= ${min}, got ${JSON.stringify(v)}`)
  return n
}

const TIER_NAMES = Object.keys(DEFAULT_TIER_LIMITS)
const TIER_KEYS = ['rpm', 'max_concurrent', 'max_streams']

export function parseTierLimits (raw: string | undefined): TierLimits {
  const out: TierLimits = structuredClone(DEFAULT_TIER_LIMITS)
  if (!raw) return out
  const example = 'e.g. {"enterprise": {"rpm": 1000}}'
  let parsed: unknown
  try { parsed = JSON.parse(raw) } catch (err) { throw new ConfigError(`TIER_LIMITS must be JSON (${(err as Error).message}); ${example}`) }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new ConfigError(`TIER_LIMITS must be a JSON object of tier -> limits; ${example}`)
  for (const [tier, v] of Object.entries(parsed as Record<string, unknown>)) {
    // Own keys only: `in` would accept inherited names (__proto__, constructor) and write to Object.prototype.
    if (!Object.prototype.hasOwnProperty.call(out, tier)) throw new ConfigError(`TIER_LIMITS: unknown tier ${JSON.stringify(tier)} (allowed: ${TIER_NAMES.join(', ')})`)
    if (!v || typeof v !== 'object' || Array.isArray(v)) throw new ConfigError(`TIER_LIMITS.${tier} must be an object with any of ${TIER_KEYS.join(', ')}`)
    for (const [k, n] of Object.entries(v as Record<string, unknown>)) {
      if (!TIER_KEYS.includes(k)) throw new ConfigError(`TIER_LIMITS.${tier}: unknown key ${JSON.stringify(k)} (allowed: ${TIER_KEYS.join(', ')})`)
      if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) throw new ConfigError(`TIER_LIMITS.${tier}.${k} must be a non-negative integer, got ${JSON.stringify(n)}`)
      ;(out[tier as keyof TierLimits] as unknown as Record<string, number>)[k] = n
    }
  }
  return out
}

function storageDriver (v: string | undefined): 'local' | 's3' {
  if (v === undefined || v === '' || v === 'local') return 'local'
  if (v === 's3') return 's3'
  throw new ConfigError(`STORAGE_DRIVER must be local or s3, got ${JSON.stringify(v)}`)
}

/** The provider env variables (docs/providers.md "Real providers"): credentials and endpoints, passed to the shards as data. */
export const PROVIDER_ENV = ['FAL_KEY', 'FAL_QUEUE_URL', 'FAL_JWKS_URL', 'FAL_API_URL', 'REPLICATE_API_TOKEN', 'REPLICATE_API_URL', 'REPLICATE_WEBHOOK_SECRET', 'KIE_API_KEY', 'KIE_API_URL', 'KIE_WEBHOOK_HMAC_KEY'] as const

function providerEnv (env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {}
  for (const k of PROVIDER_ENV) if (env[k]) out[k] = env[k]!
  return out
}

export function loadConfig (env: NodeJS.ProcessEnv = process.env, overrides: Partial<Config> = {}): Config {
  const port = int('PORT', env.PORT, 8080)
  const frontends = Math.floor(int('FRONTENDS', env.FRONTENDS, 1, 1))
  const cfg: Config = {
    port,
    host: env.HOST || '0.0.0.0',
    publicBaseUrl: (env.PUBLIC_BASE_URL || `http://localhost:${port}`).replace(/\/+$/, ''),
    databaseUrl: env.DATABASE_URL || undefined,
    redisUrl: env.REDIS_URL || undefined,
    shards: int('SHARDS', env.SHARDS, Math.max(1, availableParallelism() - frontends), 1),
    frontends,
    adminToken: env.ADMIN_TOKEN || undefined,
    metricsToken: env.METRICS_TOKEN || undefined,
    jwtSecret: env.JWT_SECRET || undefined,
    simSpeed: int('SIM_SPEED', env.SIM_SPEED, 1, 0.001),
    moderationTerms: list(env.MODERATION_TERMS).map(s => s.toLowerCase()),
    webhookAllowlist: list(env.WEBHOOK_ALLOWLIST).map(s => s.toLowerCase()),
    webhookWorkers: Math.floor(int('WEBHOOK_WORKERS', env.WEBHOOK_WORKERS, Math.max(1, Math.floor(availableParallelism() / 2)), 1)),
    webhookRetryScale: int('WEBHOOK_RETRY_SCALE', env.WEBHOOK_RETRY_SCALE, 1, 0),
    logLevel: env.LOG_LEVEL || 'info',
    dataDir: resolve(env.DATA_DIR || './data'),
    tierLimits: parseTierLimits(env.TIER_LIMITS),
    sseHeartbeatMs: int('SSE_HEARTBEAT_MS', env.SSE_HEARTBEAT_MS, 15000, 10),
    submitTimeoutMs: int('SUBMIT_TIMEOUT_MS', env.SUBMIT_TIMEOUT_MS, 15000, 1),
    dbStallTimeoutMs: int('DB_STALL_TIMEOUT_MS', env.DB_STALL_TIMEOUT_MS, 3000, 0),
    jobCacheMb: int('JOB_CACHE_MB', env.JOB_CACHE_MB, 256, 1),
    authCacheMb: int('AUTH_CACHE_MB', env.AUTH_CACHE_MB, 64, 1),
    actorIdleS: int('ACTOR_IDLE_S', env.ACTOR_IDLE_S, 300, 1),
    meteringRetentionDays: int('METERING_RETENTION_DAYS', env.METERING_RETENTION_DAYS, 30, 1),
    providersFile: env.PROVIDERS_FILE || undefined,
    providerEnv: providerEnv(env),
    resultMaxBytes: int('RESULT_MAX_BYTES', env.RESULT_MAX_BYTES, 2 * 1024 ** 3, 1),
    resultTimeoutMs: int('RESULT_TIMEOUT_MS', env.RESULT_TIMEOUT_MS, 600_000, 1),
    redisPrefix: env.REDIS_PREFIX || 'genjobs',
    policyViolationLimit: int('POLICY_VIOLATION_LIMIT', env.POLICY_VIOLATION_LIMIT, 3, 1),
    storageDriver: storageDriver(env.STORAGE_DRIVER),
    s3: {
      bucket: env.S3_BUCKET || undefined,
      region: env.S3_REGION || 'us-east-1',
      endpoint: env.S3_ENDPOINT ? env.S3_ENDPOINT.replace(/\/+$/, '') : undefined,
      accessKeyId: env.S3_ACCESS_KEY_ID || undefined,
      secretAccessKey: env.S3_SECRET_ACCESS_KEY || undefined,
      publicUrl: env.S3_PUBLIC_URL ? env.S3_PUBLIC_URL.replace(/\/+$/, '') : undefined,
      forcePathStyle: env.S3_FORCE_PATH_STYLE ? env.S3_FORCE_PATH_STYLE === 'true' || env.S3_FORCE_PATH_STYLE === '1' : Boolean(env.S3_ENDPOINT),
    },
    ...overrides,
  }
  if (cfg.storageDriver === 's3' && !cfg.s3.bucket) throw new ConfigError('STORAGE_DRIVER=s3 needs S3_BUCKET')
  // The routing file and the credentials it needs are checked here, before anything starts
  // (the embedded PostgreSQL included): a mistake is one line, not a stack after a minute of boot.
  try { loadRouting(cfg.providersFile, cfg.providerEnv) } catch (err) { throw new ConfigError((err as Error).message) }
  return cfg
}
