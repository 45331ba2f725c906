/**
 * The "usual way" job creation both Fastify baselines share (job-create, job-lifecycle): the
 * route's schema, and ONE transaction charging with a conditional UPDATE, then the ledger
 * entry and the job row, on the bench_* tables. Kept in one place so the two baselines measure
 * the same creation.
 */
import { randomBytes } from 'node:crypto'
import type postgres from 'postgres'

export const CREATE_SCHEMA = {
  body: {
    type: 'object',
    required: ['model', 'prompt'],
    additionalProperties: false,
    properties: { model: { type: 'string', maxLength: 64 }, prompt: { type: 'string', minLength: 1, maxLength: 2000 } },
  },
  headers: { type: 'object', required: ['x-account-id'], properties: { 'x-account-id': { type: 'integer', minimum: 1 } } },
} as const

export interface Created { id: string; now: Date; remaining: number }

/** Charges `price` and inserts the job in one transaction; null when the balance is short. */
export async function createJob (
  sql: postgres.Sql, accountId: number, model: string, prompt: string, price: number, estimatedSeconds: number,
): Promise<Created | null> {
  const id = 'job_' + randomBytes(12).toString('base64url')
  const now = new Date()
  const remaining = await sql.begin(async (tx) => {
    const [a] = await tx<{ credits: number }[]>`UPDATE bench_accounts SET credits = credits - ${price}, updated_at = now() WHERE id = ${accountId} AND credits >= ${price} RETURNING credits`
    if (!a) return null
    await tx`INSERT INTO bench_credit_entries (account_id, delta, kind, job_id, note) VALUES (${accountId}, ${-price}, 'charge', ${id}, ${'image ' + model})`
    await tx`INSERT INTO bench_jobs (id, account_id, type, model, status, prompt, request, credits_charged, estimated_seconds, provider, deadline_at, created_at, updated_at)
      VALUES (${id}, ${accountId}, 'image', ${model}, 'submitted', ${prompt}, ${tx.json({ model, prompt } as any)}, ${price}, ${estimatedSeconds}, 'simulated', ${new Date(now.getTime() + 600_000)}, ${now}, ${now})`
    return a.credits
  })
  return remaining === null ? null : { id, now, remaining }
}
