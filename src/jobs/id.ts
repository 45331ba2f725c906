import { randomFillSync } from 'node:crypto'

// Random bytes drawn 4 KB at a time: one call into the CSPRNG per 341 ids instead of one per id
// (a creation's randomBytes call showed up in the shard profiles of bench job-lifecycle).
const pool = Buffer.alloc(4092)
let used = pool.length

/** `prefix` + 96 random bits in base64url, from the pool. */
function randomId (prefix: string): string {
  if (used + 12 > pool.length) { randomFillSync(pool); used = 0 }
  const id = prefix + pool.toString('base64url', used, used + 12)
  used += 12
  return id
}

/** A new job id: `job_` + 96 random bits in base64url (docs/api.md "Jobs": prefix `job_`). */
export function newJobId (): string { return randomId('job_') }

/** A new webhook event id (the delivery body's `id`, docs/api.md "Webhooks"): `evt_` + 96 random bits. */
export function newEventId (): string { return randomId('evt_') }
