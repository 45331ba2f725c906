/**
 * When a webhook attempt is tried again (docs/api.md "Webhooks"): ten retries after the first
 * attempt, from 5 s to 24 h, then the delivery is `failed`.
 */

/** Delay before retry n (n = 1..10) after a failed attempt, in seconds. */
export const RETRY_SCHEDULE_S: readonly number[] = [5, 30, 120, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600]
/** The first attempt plus one per schedule entry; after the last one a delivery is `failed`. */
export const MAX_ATTEMPTS = RETRY_SCHEDULE_S.length + 1

/**
 * Milliseconds to wait after `attemptsMade` attempts have failed, or null when none is left
 * (the delivery is then `failed`). `scale` is WEBHOOK_RETRY_SCALE (tests shrink the schedule).
 */
export function retryDelayMs (attemptsMade: number, scale = 1): number | null {
  if (!Number.isInteger(attemptsMade) || attemptsMade < 1 || attemptsMade > RETRY_SCHEDULE_S.length) return null
  return Math.round(RETRY_SCHEDULE_S[attemptsMade - 1] * 1000 * scale)
}
