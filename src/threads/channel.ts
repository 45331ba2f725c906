import type { TransferListItem } from 'node:worker_threads'
import { ApiError, errorFromWire, type ErrorExtra } from '../errors.js'

/**
 * One side of a thread boundary, as that side sends it: the asks it makes (request and reply
 * type per tag) and the tells it sends (body type per tag). A boundary's protocol file declares
 * both sides (docs/architecture.md "Messages between threads").
 */
export interface Side { asks: object; tells: object }

export type AskTag<S extends Side> = keyof S['asks'] & string
export type ReqOf<S extends Side, K extends AskTag<S>> = S['asks'][K] extends { req: infer R } ? R : never
export type ResOf<S extends Side, K extends AskTag<S>> = S['asks'][K] extends { res: infer R } ? R : never
export type TellTag<S extends Side> = keyof S['tells'] & string
/** What answers the peer's asks: one handler per tag, typed both ways. */
export type Handlers<S extends Side> = { [K in AskTag<S>]: (req: ReqOf<S, K>) => Promise<ResOf<S, K>> }
/** A tell as it arrives: switching on `tag` narrows `body`. */
export type Tell<S extends Side> = { [K in TellTag<S>]: { tag: K; body: S['tells'][K] } }[TellTag<S>]

/** The wire: everything one side sends the other during one event-loop turn is one Batch. */
export interface AskEnvelope { id: number; tag: string; body: unknown }
export type ReplyEnvelope =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; code: string; message: string; extra?: ErrorExtra }
export interface TellEnvelope { tag: string; body: unknown }
export interface Batch { rep?: ReplyEnvelope[]; tell?: TellEnvelope[]; ask?: AskEnvelope[] }

/** A MessagePort, a Worker, or anything with their postMessage. */
export interface PortLike { postMessage (value: unknown, transfer?: readonly TransferListItem[]): void }

export interface ChannelOptions<In extends Side> {
  /** Names the peer in errors ("shard 2", "front-end 1"). */
  peer: string
  /** Answers the peer's asks. */
  handlers: Handlers<In>
  /** The peer's tells. */
  onTell?: (m: Tell<In>) => void
  /** An ask not answered by then fails with INTERNAL_ERROR (default 10 s). */
  timeoutMs?: number
  /** A handler's failure that is not an ApiError, as the peer gets it (default INTERNAL_ERROR). */
  failure?: (err: unknown, tag: AskTag<In>) => ApiError
}

interface Pending { resolve: (v: never) => void; reject: (e: Error) => void; deadline: number }

/** Every open channel of this thread: one timer expires all their late asks. */
const open = new Set<Channel<Side, Side>>()
let sweeper: NodeJS.Timeout | null = null
const SWEEP_MS = 200

/** The error of an ask whose peer is gone: nothing was done twice, so it is safe to retry. */
function failure (why: string): ApiError {
  return new ApiError('INTERNAL_ERROR', `Internal error (${why}); safe to retry with the same Idempotency-Key`)
}

function sweep (): void {
  const now = Date.now()
  for (const c of open) c.expire(now)
}

/**
 * Ask, reply and tell between two threads (docs/architecture.md "Messages between threads"),
 * typed by the boundary's protocol: `Out` is what this side sends, `In` what the peer sends.
 *
 * - Replies are paired with their asks by id; an error crosses as a code of src/errors.ts (with
 *   its message and extra) and is rebuilt as that ApiError on arrival.
 * - An ask not answered within its timeout fails with INTERNAL_ERROR (one timer per thread
 *   sweeps every channel's deadlines: no timer per ask).
 * - `failAll` (the peer died, restarted, or closed its port) fails everything pending with
 *   INTERNAL_ERROR and drops what was not posted yet.
 * - Everything sent during one event-loop turn crosses as one postMessage of a plain object
 *   (structured clone measured cheaper than msgpackr here: docs/decisions.md "Thread
 *   crossing"), however many asks, replies and tells it holds.
 */
export class Channel<Out extends Side, In extends Side> {
  private batch: Batch | null = null
  private transfer: TransferListItem[] | null = null
  private readonly pending = new Map<number, Pending>()
  private nextId = 1
  /** Why it was closed, once closed. */
  private closed: string | null = null
  private readonly timeoutMs: number

  constructor (private readonly port: PortLike, private readonly o: ChannelOptions<In>) {
    this.timeoutMs = o.timeoutMs ?? 10_000
    open.add(this as unknown as Channel<Side, Side>)
    if (sweeper === null) {
      sweeper = setInterval(sweep, SWEEP_MS)
      sweeper.unref()
    }
  }

  /**
   * A channel over a MessagePort it listens on: a port that closes (its other end's thread
   * ended, or closed it) fails what is pending on it.
   */
  static over<Out extends Side, In extends Side> (port: import('node:worker_threads').MessagePort, o: ChannelOptions<In>): Channel<Out, In> {
    const ch = new Channel<Out, In>(port, o)
    port.on('message', (b: Batch) => ch.receive(b))
    port.on('close', () => ch.close(`${o.peer} closed its channel`))
    return ch
  }

  /** Asks pending (tests, metrics). */
  get size (): number { return this.pending.size }

  /** `transfer` moves buffers the caller owns with the ask (they are detached here). */
  ask<K extends AskTag<Out>> (tag: K, req: ReqOf<Out, K>, timeoutMs = this.timeoutMs, transfer?: readonly TransferListItem[]): Promise<ResOf<Out, K>> {
    if (this.closed !== null) return Promise.reject(failure(this.closed))
    return new Promise<ResOf<Out, K>>((resolve, reject) => {
      const id = this.nextId++
      this.pending.set(id, { resolve: resolve as Pending['resolve'], reject, deadline: Date.now() + timeoutMs })
      ;(this.open().ask ??= []).push({ id, tag, body: req })
      if (transfer) (this.transfer ??= []).push(...transfer)
    })
  }

  /** A message that expects no answer; `transfer` moves ports or buffers with it. */
  tell<K extends TellTag<Out>> (tag: K, body: Out['tells'][K], transfer?: readonly TransferListItem[]): void {
    if (this.closed !== null) return
    ;(this.open().tell ??= []).push({ tag, body })
    if (transfer) (this.transfer ??= []).push(...transfer)
  }

  /** Feeds one batch the peer posted. */
  receive (b: Batch): void {
    if (b.rep) {
      for (const r of b.rep) {
        const p = this.pending.get(r.id)
        if (p === undefined) continue
        this.pending.delete(r.id)
        if (r.ok) p.resolve(r.value as never)
        else p.reject(errorFromWire(r.code, r.message, r.extra))
      }
    }
    if (b.tell && this.o.onTell) for (const t of b.tell) this.o.onTell(t as Tell<In>)
    if (b.ask) for (const a of b.ask) this.answer(a)
  }

  private answer (a: AskEnvelope): void {
    const h = (this.o.handlers as Record<string, ((req: unknown) => Promise<unknown>) | undefined>)[a.tag]
    let p: Promise<unknown>
    if (h === undefined) p = Promise.reject(new ApiError('INTERNAL_ERROR', `Internal error (no handler for ${a.tag})`))
    else {
      try { p = h(a.body) } catch (err) { p = Promise.reject(err) }
    }
    p.then(
      (value) => this.reply({ id: a.id, ok: true, value }),
      (err: unknown) => {
        const e = err instanceof ApiError ? err : (this.o.failure?.(err, a.tag as AskTag<In>) ?? new ApiError('INTERNAL_ERROR'))
        this.reply({ id: a.id, ok: false, code: e.code, message: e.message, extra: e.extra })
      })
  }

  private reply (r: ReplyEnvelope): void {
    if (this.closed !== null) return
    ;(this.open().rep ??= []).push(r)
  }

  private open (): Batch {
    if (this.batch === null) {
      this.batch = {}
      setImmediate(this.flush)
    }
    return this.batch
  }

  /** Posts what this turn queued now (it is posted at the end of the turn anyway). */
  flush = (): void => {
    const b = this.batch
    if (b === null) return
    this.batch = null
    const t = this.transfer
    this.transfer = null
    try {
      if (t === null) this.port.postMessage(b)
      else this.port.postMessage(b, t)
    } catch (err) {
      this.postEach(b, err)
    }
  }

  /**
   * A batch that could not be posted (a value that does not clone, or nests too deep to): each
   * envelope is posted on its own, so the one that cannot cross fails alone, as INTERNAL_ERROR to
   * its asker, and the others of the turn arrive. Buffers are copied here, not moved.
   */
  private postEach (b: Batch, err: unknown): void {
    const why = `Internal error (a message to ${this.o.peer} could not be posted: ${String((err as Error)?.message ?? err).slice(0, 200)})`
    for (const r of b.rep ?? []) {
      try { this.port.postMessage({ rep: [r] }) } catch { this.port.postMessage({ rep: [{ id: r.id, ok: false, code: 'INTERNAL_ERROR', message: why }] }) }
    }
    for (const m of b.tell ?? []) {
      try { this.port.postMessage({ tell: [m] }) } catch {}
    }
    for (const a of b.ask ?? []) {
      try { this.port.postMessage({ ask: [a] }) } catch {
        const p = this.pending.get(a.id)
        if (p !== undefined) { this.pending.delete(a.id); p.reject(new ApiError('INTERNAL_ERROR', why)) }
      }
    }
  }

  /** The peer is gone (died, restarted): every pending ask fails with INTERNAL_ERROR; nothing queued is posted. */
  failAll (why: string): void {
    this.batch = null
    this.transfer = null
    if (this.pending.size === 0) return
    for (const p of this.pending.values()) p.reject(failure(why))
    this.pending.clear()
  }

  /** @internal Fails the asks whose deadline passed (the thread's sweep timer). */
  expire (now: number): void {
    if (this.pending.size === 0) return
    for (const [id, p] of this.pending) {
      if (p.deadline > now) continue
      this.pending.delete(id)
      p.reject(new ApiError('INTERNAL_ERROR', `Internal error (${this.o.peer} did not answer in time); safe to retry`))
    }
  }

  /** No more messages either way: what is pending and every later ask fails with INTERNAL_ERROR (`why`). */
  close (why = 'shutting down'): void {
    if (this.closed !== null) return
    this.failAll(why)
    this.closed = why
    open.delete(this as unknown as Channel<Side, Side>)
    if (open.size === 0 && sweeper !== null) { clearInterval(sweeper); sweeper = null }
  }
}
