import { Metering } from '../../metering.js'

/**
 * Metering on one of several front-end threads (docs/decisions.md "Front-end threads"): each
 * thread buffers and writes its own rows (one flush timer per thread), and an explicit flush
 * (GET /v1/usage/summary's read-your-requests, tests) also flushes the other threads, so a
 * request answered by any thread is written when the flush resolves.
 */
export class ThreadedMetering extends Metering {
  /** Flushes the other threads' buffers (all rows, or those of one account). */
  peers: ((accountId: number | null) => Promise<void>) | null = null
  private stopping = false

  /** This thread's rows only (what the other threads ask for). */
  localFlush (accountId: number | null): Promise<void> {
    return accountId === null ? this.flushLocal() : super.flushFor(accountId)
  }

  /** Every thread's rows (the timer and early flushes write this thread's only). */
  override async flush (): Promise<void> {
    await Promise.all([this.flushLocal(), this.others(null)])
  }

  override async flushFor (accountId: number): Promise<void> {
    await Promise.all([super.flushFor(accountId), this.others(accountId)])
  }

  private async others (accountId: number | null): Promise<void> {
    if (this.stopping || this.peers === null) return
    let timer: NodeJS.Timeout | undefined
    // A thread that does not answer in 2 s (restarting, stopping) is not waited for longer.
    await Promise.race([this.peers(accountId).catch(() => {}), new Promise<void>(resolve => { timer = setTimeout(resolve, 2000) })])
    clearTimeout(timer)
  }

  override async close (): Promise<void> {
    this.stopping = true
    await super.close()
  }
}
