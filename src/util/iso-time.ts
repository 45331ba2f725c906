/**
 * `Date#toISOString` without its cost on the hot path (docs/decisions.md "Fewer objects a
 * request and a job"): V8 formats every call through printf, ~0.5 µs, and a job's creation
 * and completion format about ten timestamps, most within the same second. The text up to the
 * second is kept for the last second formatted and the milliseconds appended from a table.
 * The same text as toISOString for any time: from 1970 to year 9999 from the cache, before or
 * after that (and for an invalid date, which throws) through toISOString itself.
 */

/** Last millisecond toISOString formats with a four-digit year (9999-12-31T23:59:59.999Z). */
const MAX_MS = 253402300799999

/** `.000Z` ... `.999Z`. */
const MILLIS: readonly string[] = Array.from({ length: 1000 }, (_, i) => `.${String(i).padStart(3, '0')}Z`)

let cachedSecond = NaN
/** `YYYY-MM-DDTHH:MM:SS` of cachedSecond. */
let cachedPrefix = ''

/** The ISO 8601 text of epoch milliseconds `ms`, as `new Date(ms).toISOString()`. */
export function isoOfMs (ms: number): string {
  if (!(ms >= 0 && ms <= MAX_MS) || ms !== Math.floor(ms)) return new Date(ms).toISOString()
  const rest = ms % 1000
  const second = ms - rest
  if (second !== cachedSecond) {
    cachedPrefix = new Date(second).toISOString().slice(0, 19)
    cachedSecond = second
  }
  return cachedPrefix + MILLIS[rest]
}

/** `d.toISOString()`, from the cached second when it can (isoOfMs). */
export function isoOf (d: Date): string {
  return isoOfMs(d.getTime())
}
