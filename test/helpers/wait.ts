// Waiting in tests: for a condition or an event, never for a length of time. A test that
// sleeps guesses how long something takes on a loaded machine; one that waits names what it
// waits for, returns as soon as it happens and fails with that name when it does not.
import type { EventEmitter } from 'node:events'

export interface WaitOptions {
  /**
   * What is awaited, as the failure message names it ("the shard to restart"); a function is
   * called when the wait runs out, so it can name the state last seen.
   */
  what: string | (() => string)
  /** Give up after this long (default 10 s). */
  timeoutMs?: number
  /** Poll interval for a condition (default 10 ms). */
  everyMs?: number
}

/** A wait that ran out: names what it waited for and, when the condition last threw, why. */
export class WaitTimeoutError extends Error {
  constructor (what: WaitOptions['what'], timeoutMs: number, last?: unknown) {
    super(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}${last === undefined ? '' : `; last check threw ${describe(last)}`}`)
    this.name = 'WaitTimeoutError'
  }
}

function describe (v: unknown): string {
  if (v instanceof Error) return `${v.name}: ${v.message}`
  try { return JSON.stringify(v) ?? String(v) } catch { return String(v) }
}

/** What a condition resolves with once it holds. */
export type Truthy<T> = Exclude<T, false | 0 | '' | null | undefined>

const tick = (ms: number) => new Promise<void>(resolve => setTimeout(resolve, ms))

/**
 * Polls `fn` until it returns a truthy value and resolves with that value. An exception from
 * `fn` counts as "not yet" (the last one is named if the wait runs out); so does a falsy value.
 */
export async function waitFor<T> (fn: () => T | Promise<T>, o: WaitOptions): Promise<Truthy<T>> {
  const timeoutMs = o.timeoutMs ?? 10_000
  const until = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    try {
      const v = await fn()
      if (v) return v as Truthy<T>
      last = undefined
    } catch (err) {
      last = err
    }
    if (Date.now() >= until) throw new WaitTimeoutError(o.what, timeoutMs, last)
    await tick(o.everyMs ?? 10)
  }
}

/**
 * Polls `fn` until `done(value)` and resolves with that value; when the wait runs out it
 * resolves with the last value instead of throwing, so the assertion that follows reports the
 * expected and the actual value (`t.equal(await settled(() => count(), n => n === 2), 2)`).
 */
export async function settled<T> (fn: () => T | Promise<T>, done: (v: T) => boolean, o: Omit<WaitOptions, 'what'> = {}): Promise<T> {
  const until = Date.now() + (o.timeoutMs ?? 10_000)
  for (;;) {
    const v = await fn()
    if (done(v) || Date.now() >= until) return v
    await tick(o.everyMs ?? 10)
  }
}

/**
 * Resolves with the arguments of the first `event` on `emitter` that `filter` accepts
 * (every one by default); rejects after `timeoutMs` naming `what`.
 */
export function waitForEvent<A extends unknown[] = unknown[]> (
  emitter: EventEmitter, event: string, o: WaitOptions & { filter?: (...args: A) => boolean }
): Promise<A> {
  const timeoutMs = o.timeoutMs ?? 10_000
  return new Promise<A>((resolve, reject) => {
    const on = (...args: unknown[]) => {
      if (o.filter && !o.filter(...args as A)) return
      clearTimeout(timer)
      emitter.off(event, on)
      resolve(args as A)
    }
    const timer = setTimeout(() => { emitter.off(event, on); reject(new WaitTimeoutError(o.what, timeoutMs)) }, timeoutMs)
    emitter.on(event, on)
  })
}

/** Settles as `p` does, or rejects after `timeoutMs` naming `what`. */
export async function within<T> (p: Promise<T>, o: WaitOptions): Promise<T> {
  const timeoutMs = o.timeoutMs ?? 10_000
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(new WaitTimeoutError(o.what, timeoutMs)), timeoutMs) })
  try { return await Promise.race([p, late]) } finally { clearTimeout(timer) }
}

/**
 * Lets `ms` of wall-clock time pass. Only for a test where time is the behaviour under test
 * (a TTL running out, a window in which something must NOT happen, a client slow on purpose);
 * each caller says on its line why it must be time. Anything else waits with `waitFor`.
 */
export const sleep = (ms: number) => tick(ms)
