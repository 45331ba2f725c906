import { pino, type DestinationStream, type Logger } from 'pino'

/**
 * Field paths whose values never reach a log line: credentials in headers, request
 * bodies and config objects. pino's `redact` replaces them with "[Redacted]". Request lines
 * (src/http/server.ts) log the path only, never the query string or headers, so `?ticket=` and
 * signed file URLs stay out as well.
 */
export const REDACT_PATHS = [
  'authorization', 'cookie', '["x-api-key"]', 'headers.authorization', 'headers.cookie', 'headers["x-api-key"]',
  '*.authorization', '*.cookie', '*["x-api-key"]', '*.headers.authorization', '*.headers.cookie', '*.headers["x-api-key"]',
  'password', 'current_password', 'new_password', 'secret', 'webhook_secret', 'token', 'ticket', 'api_key', 'apiKey', 'jwt',
  '*.password', '*.current_password', '*.new_password', '*.secret', '*.webhook_secret', '*.token', '*.ticket', '*.api_key', '*.apiKey', '*.jwt',
  'adminToken', 'jwtSecret', 'metricsToken', '*.adminToken', '*.jwtSecret', '*.metricsToken',
  'FAL_KEY', 'REPLICATE_API_TOKEN', 'KIE_API_KEY', 'ADMIN_TOKEN', 'JWT_SECRET', 'METRICS_TOKEN',
  '*.FAL_KEY', '*.REPLICATE_API_TOKEN', '*.KIE_API_KEY', '*.ADMIN_TOKEN', '*.JWT_SECRET', '*.METRICS_TOKEN',
  'falKey', 'replicateApiToken', 'kieApiKey', '*.falKey', '*.replicateApiToken', '*.kieApiKey',
  // Provider adapter configs (src/providers/{fal,replicate,kie}.ts): key, token, apiKey, webhookSecret, hmacKey.
  '*.key', 'webhookSecret', '*.webhookSecret', 'hmacKey', '*.hmacKey',
  'REPLICATE_WEBHOOK_SECRET', 'KIE_WEBHOOK_HMAC_KEY', '*.REPLICATE_WEBHOOK_SECRET', '*.KIE_WEBHOOK_HMAC_KEY',
]

const SECRET_ENV = ['ADMIN_TOKEN', 'JWT_SECRET', 'METRICS_TOKEN', 'FAL_KEY', 'REPLICATE_API_TOKEN', 'KIE_API_KEY', 'REPLICATE_WEBHOOK_SECRET', 'KIE_WEBHOOK_HMAC_KEY']
/** API keys (docs/api.md "Accounts, sessions and keys") and JWTs, wherever they appear inside a logged string. */
const PATTERNS = /gjs_sk_[0-9a-f]{8,}|eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*/g

/** Removes known secrets from free text (error messages and stacks, which redact paths cannot reach). */
export function scrub (text: string, extra: readonly string[] = []): string {
  let out = text.replace(PATTERNS, '[Redacted]')
  for (const v of extra) if (v.length >= 8 && out.includes(v)) out = out.split(v).join('[Redacted]')
  return out
}

/**
 * The service's pino logger, used by the main thread and every worker: redaction paths plus an
 * `err` serializer that scrubs secret values (the env tokens above, API keys, JWTs) from
 * messages and stacks.
 */
export function createLogger (level: string, opts: {
  base?: Record<string, unknown>; secrets?: readonly string[]; destination?: DestinationStream
} = {}): Logger {
  const secrets = [...(opts.secrets ?? []), ...SECRET_ENV.map(k => process.env[k] ?? '')].filter(s => s.length >= 8)
  const errSerializer = (e: unknown) => {
    const v = pino.stdSerializers.err(e as Error) as unknown as Record<string, unknown>
    if (v && typeof v === 'object') {
      for (const k of ['message', 'stack']) if (typeof v[k] === 'string') v[k] = scrub(v[k] as string, secrets)
    }
    return v
  }
  const options = {
    level,
    ...(opts.base ? { base: opts.base } : {}),
    redact: { paths: REDACT_PATHS, censor: '[Redacted]' },
    serializers: { err: errSerializer },
  }
  return opts.destination ? pino(options, opts.destination) : pino(options)
}
