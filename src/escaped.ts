/**
 * Errors that escaped the request or task they belonged to and were contained, in this thread
 * (GET /metrics `genjobs_uncaught_errors_total`; docs/operations.md "Hostile input"). Nothing a
 * single request does may stop the process: such an error is logged and counted, and every
 * other connection keeps being served.
 */
export const escaped = { count: 0 }

/** Logs and counts one contained error; `where` names the callback it escaped from. */
export function containEscaped (err: unknown, log: { error: (obj: object, msg: string) => void }, where: string): void {
  escaped.count++
  try { log.error({ err, where }, 'error contained (the process goes on)') } catch {}
}
