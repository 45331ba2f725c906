import type { Q } from './connect.js'

/** One audited login attempt: a wrong password or a throttled try. */
export interface LoginAttempt { email: string; accountId: number | null; ip: string; outcome: 'failure' | 'throttled' }

export async function recordLoginAttempts (q: Q, rows: LoginAttempt[]): Promise<void> {
  if (rows.length === 0) return
  await q`INSERT INTO login_attempts ${q(rows.map(r => ({ email: r.email, account_id: r.accountId, ip: r.ip, outcome: r.outcome })), 'email', 'account_id', 'ip', 'outcome')}`
}
