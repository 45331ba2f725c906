import { ApiError } from '../errors.js'
import { findBatch, insertBatch } from '../db/jobs.js'
import type { BatchItemView, BatchView, JobSpec } from '../domain.js'
import type { AccountActor } from './account-actor.js'
import type { ShardRequests } from './protocol.js'

/** batch.create as the actor sees it: each order rebuilt into a full spec on arrival. */
export type BatchReq = Omit<ShardRequests['batch.create']['req'], 'items'> & {
  items: Array<Omit<ShardRequests['batch.create']['req']['items'][number], 'spec'> & { spec?: JobSpec }>
}

/**
 * POST /batch (docs/api.md "Batch (paid plans)"): items priced and charged individually, in order; the first 402
 * stops submission and later items are SKIPPED; other errors do not stop it, but a key already
 * at its concurrency cap gets the whole batch refused (429 concurrency_limit_reached). With an
 * Idempotency-Key the whole answer is remembered and replayed.
 */
export async function runBatch (a: AccountActor, req: BatchReq): Promise<BatchView> {
  const key = req.idempotencyKey
  if (key === undefined) return items(a, req)
  const running = a.batchIdem.get(key)
  if (running) { await running.catch(() => {}); return runBatch(a, req) }
  // Registered before the first await, so a concurrent duplicate waits for this one.
  const p = (async (): Promise<BatchView> => {
    const stored = await findBatch(a.deps.sql, a.id, key)
    if (stored) {
      if (stored.request_hash !== req.fingerprint) throw new ApiError('IDEMPOTENCY_CONFLICT')
      return { ...(stored.response as BatchView), replayed: true }
    }
    const view = await items(a, req)
    await a.deps.commit.run(tx => insertBatch(tx, a.id, key, req.fingerprint ?? '', view))
    return view
  })()
  a.batchIdem.set(key, p)
  try { return await p } finally { a.batchIdem.delete(key) }
}

async function items (a: AccountActor, req: BatchReq): Promise<BatchView> {
  const results: BatchItemView[] = []
  let estimated = 0
  let charged = 0
  let stop = false
  let tried = 0
  for (const item of req.items) {
    if (item.spec) estimated += item.spec.credits
    if (stop) {
      results.push({ index: item.index, type: item.type, status: null, error: { error: true, code: 'SKIPPED', message: 'Not submitted: an earlier item failed with INSUFFICIENT_CREDITS' } })
      continue
    }
    if (!item.spec) {
      const { status, ...error } = item.error!
      results.push({ index: item.index, type: item.type, status, error })
      continue
    }
    // With a batch Idempotency-Key each item gets its own key derived from it (':' is not in
    // the client key alphabet). If the shard dies mid-batch, the client's retry re-runs it and
    // the items already created replay instead of being charged a second time.
    const itemKey = req.idempotencyKey !== undefined ? `batch:${req.idempotencyKey}:${item.index}` : undefined
    tried++
    try {
      const { created } = await a.createJob({
        accountId: req.accountId, keyId: req.keyId, maxConcurrent: req.maxConcurrent, spec: item.spec,
        idempotencyKey: itemKey, fingerprint: itemKey !== undefined ? `${req.fingerprint ?? ''}:${item.index}` : undefined,
      })
      delete created.replayed // reported as the creation it was
      charged += created.credits_charged
      results.push({ index: item.index, type: item.type, status: 201, job: created })
    } catch (err) {
      const e = err instanceof ApiError ? err : new ApiError('INTERNAL_ERROR')
      // The key was at its concurrency cap before the batch began (its first creation was
      // refused for it): the whole request is a 429 with Retry-After, as on /generate/*
      // (docs/api.md "Batch (paid plans)"). A cap reached partway answers per item.
      if (e.code === 'concurrency_limit_reached' && tried === 1) throw e
      results.push({ index: item.index, type: item.type, status: e.status, error: e.toJSON() as BatchItemView['error'] })
      if (e.code === 'INSUFFICIENT_CREDITS') stop = true
      // A 504 created and charged its job (details.job_id): the totals must say so.
      if (e.code === 'GATEWAY_TIMEOUT') charged += item.spec.credits
    }
  }
  const s = await a.get()
  return { results, estimated_credits: estimated, credits_charged: charged, remaining_credits: s.credits }
}
