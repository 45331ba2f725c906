/**
 * Every message that crosses a thread boundary (DESIGN.md section 2, "Message passing").
 * Only plain data crosses; errors cross as codes of src/errors.ts and are rebuilt on arrival.
 * Messages are batched per event-loop turn and msgpackr-encoded (src/actors/port.ts).
 */

/** An account's state as the AccountActor holds it. */
export interface AccountView {
  id: number
  email: string
  credits: number
  has_purchased: boolean
  enterprise: boolean
  banned: boolean
  credits_locked: boolean
  email_verified: boolean
}

/** Kinds of credit ledger entries (DESIGN.md section 3). */
export type CreditKind = 'grant' | 'purchase' | 'charge' | 'refund' | 'adjustment'

/** Requests from the main thread to a shard, keyed by tag, with their reply types. */
export interface ShardRequests {
  /** Balance and flags, loaded from PostgreSQL on first use. */
  'account.get': { req: { accountId: number }; res: AccountView }
  /** Adds credits (grant, purchase or adjustment) through the group commit. */
  'account.credit': {
    req: { accountId: number; credits: number; kind: 'grant' | 'purchase' | 'adjustment'; note?: string; currency?: string; amount?: number }
    res: AccountView
  }
  /** Drops the cached state so the next use reloads it (after an operator PATCH). */
  'account.reload': { req: { accountId: number }; res: AccountView }
  /** Test and ops probe: answers after the shard's pending group commit is durable. */
  'shard.ping': { req: Record<never, never>; res: { shard: number; actors: number } }
}

export type ShardTag = keyof ShardRequests
export type ShardMsg = { [K in ShardTag]: { type: K } & ShardRequests[K]['req'] }[ShardTag]

/** A request envelope: `id` pairs it with its reply. */
export interface Envelope { id: number; msg: ShardMsg }

/** A reply envelope. */
export type ReplyEnvelope =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; code: string; message: string; extra?: Record<string, unknown> }

/** Events a shard pushes to the main thread unasked (job status changes, ...). */
export type ShardEvent = { type: 'shard.ready'; shard: number }

/** One postMessage carries one batch: requests, replies and events of one event-loop turn. */
export interface Batch {
  req?: Envelope[]
  rep?: ReplyEnvelope[]
  ev?: ShardEvent[]
}

/** What a shard worker is started with. */
export interface ShardInit {
  shard: number
  shards: number
  databaseUrl: string
  logLevel: string
}
