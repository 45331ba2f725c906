import { ApiError, errorFromWire } from '../errors.js'
import type { Call, Reply } from '../http/front-ends/protocol.js'

type Req<C, K extends keyof C> = C[K] extends { req: infer R } ? R : never
type Res<C, K extends keyof C> = C[K] extends { res: infer R } ? R : never
export type Handlers<C> = { [K in keyof C & string]: (req: Req<C, K>) => Promise<Res<C, K>> }

/**
 * Calls over one thread channel, typed both ways: `Out` is what this side asks, `In` what it
 * answers. Errors cross as codes (src/errors.ts) and are rebuilt on arrival; a call pending
 * when the other side ends fails with INTERNAL_ERROR (`failAll`).
 */
export class Rpc<Out, In> {
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>()
  private nextId = 1

  constructor (private readonly send: (m: Call<Out> | Reply) => void, private readonly handlers: Handlers<In>) {}

  call<K extends keyof Out & string> (op: K, req: Req<Out, K>): Promise<Res<Out, K>> {
    const id = this.nextId++
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject })
      this.send({ t: 'call', id, op, req } as unknown as Call<Out>)
    })
  }

  /** Feeds a message of the channel; false when it is not a call or reply. */
  receive (m: { t: string }): boolean {
    if (m.t === 'reply') {
      const r = m as Reply
      const p = this.pending.get(r.id)
      if (!p) return true
      this.pending.delete(r.id)
      if (r.ok) p.resolve(r.value)
      else p.reject(errorFromWire(r.code, r.message))
      return true
    }
    if (m.t !== 'call') return false
    const c = m as unknown as { id: number; op: keyof In & string; req: never }
    const h = this.handlers[c.op] as ((req: unknown) => Promise<unknown>) | undefined
    const run = h ? Promise.resolve().then(() => h(c.req)) : Promise.reject(new ApiError('INTERNAL_ERROR', `unknown call ${c.op}`))
    run.then(
      (value) => this.send({ t: 'reply', id: c.id, ok: true, value }),
      (err: unknown) => {
        const e = err instanceof ApiError ? err : new ApiError('INTERNAL_ERROR', String(err))
        this.send({ t: 'reply', id: c.id, ok: false, code: e.code, message: e.message })
      })
    return true
  }

  failAll (why: string): void {
    for (const [id, p] of this.pending) {
      this.pending.delete(id)
      p.reject(new ApiError('INTERNAL_ERROR', `Internal error (${why}); safe to retry`))
    }
  }
}
