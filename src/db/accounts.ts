import type { Q, Sql } from './connect.js'
import type { AccountView, CreditKind } from '../domain.js'


/** An account row as the front end needs it for authentication (no balance). */
export interface AccountAuthRow {
  id: number
  email: string
  password_hash: string
  email_verified: boolean
  banned: boolean
  credits_locked: boolean
  has_purchased: boolean
  enterprise: boolean
  password_changed_at: Date | null
}

export interface NewAccount { email: string; passwordHash: string; verified: boolean; credits: number; note: string }

/** Creates an account and its opening grant in one transaction; null when the email is taken. */
export async function createAccount (sql: Sql, a: NewAccount): Promise<{ id: number; email: string; credits: number } | null> {
  return sql.begin(async (tx) => {
    const rows = await tx<{ id: number; email: string; credits: number }[]>`
      INSERT INTO accounts (email, password_hash, email_verified, credits)
      VALUES (${a.email}, ${a.passwordHash}, ${a.verified}, ${a.credits})
      ON CONFLICT (lower(email)) DO NOTHING
      RETURNING id, email, credits`
    if (rows.length === 0) return null
    if (a.credits > 0) {
      await tx`INSERT INTO credit_entries (account_id, delta, kind, note) VALUES (${rows[0].id}, ${a.credits}, 'grant', ${a.note})`
    }
    return rows[0]
  }) as Promise<{ id: number; email: string; credits: number } | null>
}

export async function findAccountByEmail (sql: Q, email: string): Promise<AccountAuthRow | undefined> {
  const [row] = await sql<AccountAuthRow[]>`
    SELECT id, email, password_hash, email_verified, banned, credits_locked, has_purchased, enterprise, password_changed_at
    FROM accounts WHERE lower(email) = lower(${email})`
  return row
}

export async function findAccountById (sql: Q, id: number): Promise<AccountAuthRow | undefined> {
  const [row] = await sql<AccountAuthRow[]>`
    SELECT id, email, password_hash, email_verified, banned, credits_locked, has_purchased, enterprise, password_changed_at
    FROM accounts WHERE id = ${id}`
  return row
}

export async function loadAccountView (sql: Q, id: number): Promise<AccountView | undefined> {
  const [row] = await sql<AccountView[]>`
    SELECT id, email, credits, has_purchased, enterprise, banned, credits_locked, email_verified, free_videos_used
    FROM accounts WHERE id = ${id}`
  return row
}

export async function setPassword (sql: Q, id: number, passwordHash: string, changedAt: Date): Promise<void> {
  await sql`UPDATE accounts SET password_hash = ${passwordHash}, password_changed_at = ${changedAt}, updated_at = now() WHERE id = ${id}`
}

export interface AccountFlags { banned?: boolean; email_verified?: boolean; credits_locked?: boolean; enterprise?: boolean }

const FLAG_COLUMNS: ReadonlySet<string> = new Set(['banned', 'email_verified', 'credits_locked', 'enterprise'])

export async function updateFlags (sql: Q, id: number, f: AccountFlags): Promise<boolean> {
  // Only the four flag columns: the keys become column names in the UPDATE.
  const cols = Object.fromEntries(Object.entries(f).filter(([k, v]) => FLAG_COLUMNS.has(k) && typeof v === 'boolean'))
  if (Object.keys(cols).length === 0) {
    const r = await sql`SELECT 1 FROM accounts WHERE id = ${id}`
    return r.length > 0
  }
  const r = await sql`UPDATE accounts SET ${sql(cols)}, updated_at = now() WHERE id = ${id}`
  return r.count > 0
}

/**
 * Applies one ledger entry and moves the snapshot with it (docs/architecture.md "Durability"). A negative
 * delta is conditional (`credits >= -delta`): 0 rows means the balance did not cover it,
 * which on several nodes is the final guard against overspending. Returns the new balance or
 * null when refused.
 */
export async function applyCredit (
  tx: Q, accountId: number, delta: number, kind: CreditKind, jobId: string | null, note: string | null
): Promise<number | null> {
  const rows = delta < 0
    ? await tx<{ credits: number }[]>`UPDATE accounts SET credits = credits + ${delta}, updated_at = now() WHERE id = ${accountId} AND credits >= ${-delta} RETURNING credits`
    : await tx<{ credits: number }[]>`UPDATE accounts SET credits = credits + ${delta}, updated_at = now() WHERE id = ${accountId} RETURNING credits`
  if (rows.length === 0) return null
  await tx`INSERT INTO credit_entries (account_id, delta, kind, job_id, note) VALUES (${accountId}, ${delta}, ${kind}, ${jobId}, ${note})`
  return rows[0].credits
}

/**
 * An operator grant or a purchase (kind 'purchase' also records it): the new balance, passed
 * through `credited` as soon as the credit answered, or null when the account does not exist.
 */
export async function creditAccount<B> (
  tx: Q, accountId: number, c: { credits: number; kind: CreditKind; note?: string; currency?: string; amount?: number },
  credited: (balance: number) => B
): Promise<B | null> {
  const b = await applyCredit(tx, accountId, c.credits, c.kind, null, c.note ?? null)
  if (b === null) return null
  const out = credited(b)
  if (c.kind === 'purchase') await recordPurchase(tx, accountId, c.credits, c.currency ?? null, c.amount ?? null)
  return out
}

export async function recordPurchase (tx: Q, accountId: number, credits: number, currency: string | null, amount: number | null): Promise<void> {
  await tx`INSERT INTO purchases (account_id, credits, currency, amount) VALUES (${accountId}, ${credits}, ${currency}, ${amount})`
  await tx`UPDATE accounts SET has_purchased = true WHERE id = ${accountId}`
}

/** Ledger totals for the operator view and the invariant check. */
export async function ledgerTotals (sql: Q, accountId: number): Promise<{ entries: number; sum: number; by_kind: Record<string, number> }> {
  const rows = await sql<{ kind: string; n: number; s: number }[]>`
    SELECT kind, count(*)::int AS n, coalesce(sum(delta), 0)::bigint AS s FROM credit_entries WHERE account_id = ${accountId} GROUP BY kind`
  const by: Record<string, number> = {}
  let entries = 0
  let sum = 0
  for (const r of rows) { by[r.kind] = Number(r.s); entries += r.n; sum += Number(r.s) }
  return { entries, sum, by_kind: by }
}

/** Counts a content-policy violation; at `threshold` the account is suspended. */
export async function recordViolation (tx: Q, accountId: number, threshold: number): Promise<{ policy_violations: number; banned: boolean }> {
  const [row] = await tx<{ policy_violations: number; banned: boolean }[]>`
    UPDATE accounts SET policy_violations = policy_violations + 1,
      banned = banned OR policy_violations + 1 >= ${threshold}, updated_at = now()
    WHERE id = ${accountId} RETURNING policy_violations, banned`
  return row
}

/** Credits the account was granted (GET /v1/credits free_trial.credits_granted). */
export async function grantedCredits (sql: Q, accountId: number): Promise<number> {
  const [g] = await sql<{ granted: number }[]>`SELECT coalesce(sum(delta), 0)::bigint AS granted FROM credit_entries WHERE account_id = ${accountId} AND kind = 'grant'`
  return Number(g.granted)
}
