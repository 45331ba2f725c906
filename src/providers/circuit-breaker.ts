/**
 * Per-route circuit breaker (docs/architecture.md "Providers and media"): after `threshold` consecutive submission
 * failures it opens for `coolDownMs`; while open, creations answer 502 PROVIDER_ERROR and charge
 * nothing. After the cool-down one trial submission is let through (half-open).
 * Only transport errors, 5xx and timeouts are failures (`failure`). An upstream refusal of the
 * input (fal/Replicate 422, Kie's 4xx body codes) is the request's fault, not the route's: it
 * is `refused`, which neither counts nor resets (docs/providers.md "Breakers").
 */
export class CircuitBreaker {
  private failures = 0
  private openUntil = 0
  private trialInFlight = false
  /**
   * When an unanswered trial stops blocking. A trial can end without success() or failure():
   * the job went `queued` (never submitted) or its submission timed out (504). Without this
   * expiry such a trial kept the breaker open for good.
   */
  private trialUntil = 0

  constructor (private readonly threshold = 5, private readonly coolDownMs = 30_000) {}

  /** True when a submission may be attempted now. */
  allow (now = Date.now()): boolean {
    if (this.failures < this.threshold) return true
    if (now < this.openUntil) return false
    if (this.trialInFlight && now < this.trialUntil) return false
    this.trialInFlight = true
    this.trialUntil = now + this.coolDownMs
    return true
  }

  /** For metrics: 0 closed, 1 half-open (a trial may go or is in flight), 2 open. */
  get state (): number {
    if (this.failures < this.threshold) return 0
    return Date.now() < this.openUntil ? 2 : 1
  }

  get open (): boolean { return this.failures >= this.threshold && Date.now() < this.openUntil }

  success (): void { this.failures = 0; this.trialInFlight = false }

  /**
   * The route answered and refused this input (4xx). Not a failure of the route: the count is
   * left as it is, and a half-open trial ends without a verdict (the next request tries again).
   */
  refused (): void { this.trialInFlight = false }

  failure (now = Date.now()): void {
    this.failures++
    this.trialInFlight = false
    if (this.failures >= this.threshold) this.openUntil = now + this.coolDownMs
  }
}
