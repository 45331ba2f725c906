/**
 * Serialises an actor's messages: each runs after the previous one settled, so handlers see
 * a consistent state without locks (docs/architecture.md "Messages between threads": "each actor's messages run one after
 * another").
 */
export class Mailbox {
  private tail: Promise<unknown> = Promise.resolve()
  private depth = 0

  get size (): number { return this.depth }

  post<T> (fn: () => Promise<T> | T): Promise<T> {
    this.depth++
    const run = this.tail.then(fn, fn)
    this.tail = run.then(() => { this.depth-- }, () => { this.depth-- })
    return run
  }
}
