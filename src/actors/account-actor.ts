import { ApiError } from '../errors.js'
import { applyCredit, loadAccountView, recordPurchase } from '../db/accounts.js'
import type { Sql } from '../db/connect.js'
import type { GroupCommit } from './group-commit.js'
import { Mailbox } from './mailbox.js'
import type { AccountView, ShardRequests } from './protocol.js'

export interface ActorDeps { sql: Sql; commit: GroupCommit }

/**
 * Holds one account's balance and flags in memory (DESIGN.md section 2), loaded from
 * PostgreSQL on first use. Every credit change goes through the shard's group commit and is
 * applied to memory only after COMMIT.
 */
export class AccountActor {
  readonly mailbox = new Mailbox()
  private state: AccountView | null = null

  constructor (readonly id: number, private readonly deps: ActorDeps) {}

  private async load (): Promise<AccountView> {
    if (this.state) return this.state
    const v = await loadAccountView(this.deps.sql, this.id)
    if (!v) throw new ApiError('USER_NOT_FOUND', 'Account does not exist')
    this.state = v
    return v
  }

  get (): Promise<AccountView> {
    return this.mailbox.post(async () => ({ ...(await this.load()) }))
  }

  reload (): Promise<AccountView> {
    return this.mailbox.post(async () => { this.state = null; return { ...(await this.load()) } })
  }

  credit (req: ShardRequests['account.credit']['req']): Promise<AccountView> {
    return this.mailbox.post(async () => {
      const s = await this.load()
      if (!Number.isInteger(req.credits) || req.credits <= 0) throw new ApiError('VALIDATION_ERROR', 'credits must be a positive integer')
      const balance = await this.deps.commit.run(async (tx) => {
        const b = await applyCredit(tx, this.id, req.credits, req.kind, null, req.note ?? null)
        if (req.kind === 'purchase') await recordPurchase(tx, this.id, req.credits, req.currency ?? null, req.amount ?? null)
        return b
      })
      if (balance === null) throw new ApiError('USER_NOT_FOUND', 'Account does not exist')
      s.credits = balance
      if (req.kind === 'purchase') s.has_purchased = true
      return { ...s }
    })
  }
}
