/**
 * The clients of outbound requests to URLs someone else gave the service (docs/architecture.md
 * "Address policy"): every connection goes through the address-policy connector
 * (src/net/dns-guard.ts). Result downloads and webhook delivery use the service's HTTP/1.1
 * client (src/net/h1-client.ts) over it, a test delivery an undici Agent; provider API calls go
 * to operator-configured base URLs and use src/net/json-client.ts without this guard.
 */
import { Agent } from 'undici'
import { Client } from './h1-client.js'
import { guardedConnector, type LookupAll } from './dns-guard.js'

export interface GuardedAgentOptions {
  /** WEBHOOK_ALLOWLIST: host or host:port entries that may be plain http and private. */
  allowlist: readonly string[]
  /** Connect timeout, ms. */
  timeoutMs: number
  lookupAll?: LookupAll
  /** Sockets per origin (undici's default: unlimited). */
  connections?: number
  /** Requests written ahead per socket (undici's default: 1; 0 closes the socket after each answer). */
  pipelining?: number
}

/** An undici Agent whose every connection obeys the address policy. */
export function guardedAgent (o: GuardedAgentOptions): Agent {
  return new Agent({
    connect: guardedConnector({ allowlist: o.allowlist, timeoutMs: o.timeoutMs, lookupAll: o.lookupAll }),
    connections: o.connections,
    pipelining: o.pipelining,
  })
}

/**
 * Connect timeout and sockets per origin of the shared download clients (per thread). A provider
 * serves every result from one origin (its CDN) and a download lasts as long as its file does,
 * so this bounds a shard's completions a second at DOWNLOAD_CONNECTIONS / download time: 8
 * sockets held completions to a few hundred a second even from a local stub
 * (docs/benchmarks.md "provider-sse").
 */
const DOWNLOAD_CONNECT_TIMEOUT_MS = 15_000
const DOWNLOAD_CONNECTIONS = 64
const downloadClients = new Map<string, Client>()

/**
 * The guarded client of downloads (provider results): one per allowlist for the life of the
 * thread, so its sockets are kept alive from one download to the next.
 */
export function downloadClient (allowlist: readonly string[]): Client {
  const k = allowlist.join(',')
  let c = downloadClients.get(k)
  if (c === undefined) {
    c = new Client(guardedConnector({ allowlist, timeoutMs: DOWNLOAD_CONNECT_TIMEOUT_MS }), { maxConnections: DOWNLOAD_CONNECTIONS })
    downloadClients.set(k, c)
  }
  return c
}
