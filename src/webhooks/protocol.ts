import type { Config } from '../config.js'
import type { StatsSnapshot } from '../worker-stats.js'
import type { ClaimedDelivery } from '../db/webhooks.js'

/**
 * The delivery-worker boundary (docs/architecture.md "Messages between threads"): what the main
 * thread's DeliveryPool sends a delivery worker (`ToDelivery`) and what the worker sends back
 * (`FromDelivery`), on a src/threads/channel.ts Channel.
 */

/** What the delivery worker is started with (src/webhooks/delivery-pool.ts). */
export interface DeliveryInit {
  databaseUrl: string
  config: Config
  version: string
  /** Claim lease (CLAIM_LEASE_S unless a test shortens it). */
  leaseSeconds: number
}

export interface ToDelivery {
  asks: {
    /** This worker's measurements for /metrics (src/metrics.ts). */
    stats: { req: Record<never, never>; res: StatsSnapshot }
    /**
     * Graceful stop: no new claims; requests in flight get `graceMs` to finish and be recorded;
     * every claim not recorded is released. Answered once stopped.
     */
    stop: { req: { graceMs: number }; res: null }
  }
  tells: {
    /**
     * Outbox rows this node's shards committed already claimed for it (docs/architecture.md
     * "Durability", the outbox): sent as if this worker had claimed them.
     */
    hand: { rows: ClaimedDelivery[] }
  }
}

export interface FromDelivery {
  asks: Record<never, never>
  tells: {
    ready: Record<never, never>
    /** Whether its claims fill their limit (more rows are due than this worker holds). */
    backlog: { deep: boolean }
  }
}
