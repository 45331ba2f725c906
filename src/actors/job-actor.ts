import { Readable } from 'node:stream'
import type { Provider, ProviderJob, ProviderStatus } from '../providers/provider.js'
import type { JobRow, JobStatus } from '../jobs/view.js'
import { resultFileOf } from '../providers/simulated.js'
import type { Storage } from '../storage/storage.js'

/** What a JobActor needs from its AccountActor (which owns balance and commits). */
export interface JobHost {
  /** Persist a non-terminal change (status, progress, provider id). */
  progress (job: JobActor, status: JobStatus, progress: number, providerJobId: string | null): Promise<void>
  /** Persist the terminal state; failures refund in the same transaction. */
  complete (job: JobActor, resultUrl: string): Promise<void>
  fail (job: JobActor, message: string, policyViolation: boolean): Promise<void>
  storage: Storage
  log: (msg: string, extra?: Record<string, unknown>) => void
}

/** Poll cadence: a tenth of the expected run time, between 20 ms and 5 s; errors back off to 60 s. */
const MIN_POLL_MS = 20
const MAX_POLL_MS = 5000
const MAX_BACKOFF_MS = 60_000

/**
 * One job's state machine (SPEC.md section 3): queued -> submitted -> processing ->
 * completed | failed | cancelled. It polls its provider with backoff, and asks its host
 * (the AccountActor) to persist each change. Plain object with one timer; no thread of its own.
 */
export class JobActor {
  timer: NodeJS.Timeout | null = null
  /** Set while a submission is outstanding (queued retry, or a submit that timed out). */
  submitting: Promise<unknown> | null = null
  /** The provider's answer to `submitting`, noted when it arrives and persisted by tick(). */
  private answer: { providerJobId: string } | { refused: Error } | null = null
  private errors = 0
  private readonly basePollMs: number
  terminal = false

  constructor (readonly row: JobRow, readonly pj: ProviderJob, readonly provider: Provider, private readonly host: JobHost, expectedMs: number) {
    this.basePollMs = Math.min(MAX_POLL_MS, Math.max(MIN_POLL_MS, Math.round(expectedMs / 10)))
  }

  get id (): string { return this.row.id }

  schedule (delayMs = this.basePollMs): void {
    if (this.terminal) return
    if (this.timer) clearTimeout(this.timer)
    this.timer = setTimeout(() => {
      this.timer = null
      this.tick().catch((err) => {
        // A write that failed (a database hiccup, a failed group commit) must not strand the
        // job: nothing re-armed the timer here before, so it stayed non-terminal until restart.
        this.errors++
        this.host.log('job tick failed; retrying', { job: this.id, err: String(err), errors: this.errors })
        this.schedule(this.backoffMs())
      })
    }, delayMs)
  }

  private backoffMs (): number {
    return Math.min(MAX_BACKOFF_MS, this.basePollMs * 2 ** this.errors)
  }

  stop (): void {
    this.terminal = true
    if (this.timer) { clearTimeout(this.timer); this.timer = null }
  }

  /** Adopts the answer of a submission that timed out at creation, whenever it comes. */
  awaitSubmission (p: Promise<{ providerJobId: string }>): void {
    this.submitting = p
    // Keep ticking while the answer is outstanding: a provider that never answers must still
    // meet the job's deadline (failed + refund), and tick() only re-arms while `submitting`.
    this.answer = null
    this.schedule()
    // The answer is only noted here and persisted by tick(), so a failed write is retried like
    // any other (and never becomes an unhandled rejection, which would kill the shard worker).
    // `submitting` stays set until the answer is persisted: the job cannot be cancelled and
    // is not submitted again in between.
    p.then(({ providerJobId }) => {
      if (this.submitting !== p) return
      this.answer = { providerJobId }
      this.schedule(0)
    }, (err: unknown) => {
      if (this.submitting !== p) return
      this.answer = { refused: err instanceof Error ? err : new Error(String(err)) }
      this.schedule(0)
    })
  }

  private async tick (): Promise<void> {
    if (this.terminal) return
    if (Date.now() >= this.row.deadline_at.getTime()) {
      await this.host.fail(this, 'The provider did not finish the job before its deadline; credits refunded', false)
      return
    }
    if (this.submitting) {
      const a = this.answer
      if (a === null) { this.schedule(); return }
      if ('refused' in a) {
        await this.host.fail(this, `The provider refused the job: ${a.refused.message}`, false)
        return
      }
      await this.host.progress(this, 'submitted', this.row.progress, a.providerJobId)
      this.submitting = null
      this.answer = null
      this.errors = 0
      this.schedule()
      return
    }
    if (this.row.provider_job_id === null) {
      // Queued for capacity, or resumed after a crash before the provider's id was recorded.
      if (!this.provider.hasCapacity(this.pj)) { this.schedule(); return }
      const p = this.provider.submit(this.pj)
      this.awaitSubmission(p)
      return
    }
    let st: ProviderStatus
    try {
      st = await this.provider.status(this.row.provider_job_id, this.pj)
      this.errors = 0
    } catch (err) {
      this.errors++
      this.host.log('provider status failed', { job: this.id, err: String(err), errors: this.errors })
      this.schedule(Math.min(MAX_BACKOFF_MS, this.basePollMs * 2 ** this.errors))
      return
    }
    if (this.terminal) return
    switch (st.state) {
      case 'queued':
        if (this.row.status !== 'submitted') await this.host.progress(this, 'submitted', 0, null)
        this.schedule()
        return
      case 'processing': {
        const progress = Math.max(this.row.progress, Math.min(99, Math.max(0, Math.floor(st.progress))))
        if (this.row.status !== 'processing' || progress !== this.row.progress) await this.host.progress(this, 'processing', progress, null)
        this.schedule()
        return
      }
      case 'completed': {
        let url: string
        try {
          url = await this.store(st.resultUrl!)
        } catch (err) {
          this.errors++
          this.host.log('storing the result failed', { job: this.id, err: String(err) })
          this.schedule(Math.min(MAX_BACKOFF_MS, this.basePollMs * 2 ** this.errors))
          return
        }
        await this.host.complete(this, url)
        return
      }
      case 'failed':
        await this.host.fail(this, st.error ?? 'The provider failed the job', st.policyViolation === true)
    }
  }

  /**
   * Results live in our storage (DESIGN.md section 6): a provider URL is copied in; one that
   * already points at our storage (the simulated provider writes there) is kept.
   */
  private async store (resultUrl: string): Promise<string> {
    const storage = this.host.storage
    const file = resultFileOf(this.pj)
    const key = `results/${this.id}.${file.ext}`
    if (resultUrl === storage.url(key)) return resultUrl
    const res = await fetch(resultUrl, { redirect: 'follow', signal: AbortSignal.timeout(120_000) })
    if (!res.ok || !res.body) throw new Error(`fetching the provider result answered ${res.status}`)
    await storage.put(key, Readable.fromWeb(res.body as any), res.headers.get('content-type') ?? file.contentType)
    return storage.url(key)
  }
}
