/**
 * A fixed-size open-addressing table in a SharedArrayBuffer, shared by every front-end thread
 * of a process (docs/decisions.md "Front-end threads"). A slot is `width` Int32 cells:
 * [lock, kind, idHi, idLo, ...payload]. Keys are (kind, id) pairs stored exactly (no hash
 * compared in place of the key), so two keys never share a slot's counts.
 *
 * Concurrency: each slot has a lock (spin, then Atomics.wait); every read-modify-write
 * of a slot's payload runs under it. Claiming a slot for a new key runs under a table lock,
 * so two threads never insert the same key twice. A slot whose payload is "idle" (an expired
 * window, a zero count) may be reused for another key; a thread that found the slot under the
 * old key sees the key changed once it holds the slot lock and looks again.
 *
 * Table full (every slot in the probe range busy): `with` returns `full` and the caller
 * refuses safely (it never admits a request it could not count).
 */
const LOCK = 0
const KIND = 1
const HI = 2
const LO = 3
export const PAYLOAD = 4
const TABLE_LOCK = 0
/** Tries before a waiter sleeps (holders keep a lock for well under a microsecond). */
const SPIN = 64

export interface SharedTableInit { sab: SharedArrayBuffer; slots: number; width: number }

export class SharedTable {
  readonly cells: Int32Array
  private readonly guard: Int32Array
  readonly slots: number
  readonly width: number
  /** Slots probed from a key's home before the table counts as full. */
  readonly probeLimit: number

  constructor (init: SharedTableInit) {
    this.slots = init.slots
    this.width = init.width
    this.guard = new Int32Array(init.sab, 0, 1)
    this.cells = new Int32Array(init.sab, 4, init.slots * init.width)
    this.probeLimit = Math.min(init.slots, 256)
  }

  /** A zeroed table of `slots` slots of `payload` cells each (plus the 4 header cells). */
  static create (slots: number, payload: number): SharedTableInit {
    const width = PAYLOAD + payload
    return { sab: new SharedArrayBuffer(4 + slots * width * 4), slots, width }
  }

  private home (kind: number, hi: number, lo: number): number {
    let h = Math.imul(lo ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(hi + kind, 0xc2b2ae35)
    h ^= h >>> 15
    return (h >>> 0) % this.slots
  }

  /**
   * A futex-style mutex (0 free, 1 held, 2 held with waiters): a short spin, then the thread
   * sleeps in Atomics.wait until the holder's unlock wakes it, so a holder that was descheduled
   * (more threads than cores) gets the core instead of a spinning waiter.
   */
  private lock (arr: Int32Array, i: number): void {
    let c = Atomics.compareExchange(arr, i, 0, 1)
    if (c === 0) return
    for (let n = 0; n < SPIN; n++) {
      c = Atomics.compareExchange(arr, i, 0, 1)
      if (c === 0) return
    }
    if (c !== 2) c = Atomics.exchange(arr, i, 2)
    while (c !== 0) {
      Atomics.wait(arr, i, 2)
      c = Atomics.exchange(arr, i, 2)
    }
  }

  private unlock (arr: Int32Array, i: number): void {
    if (Atomics.sub(arr, i, 1) !== 1) {
      Atomics.store(arr, i, 0)
      Atomics.notify(arr, i, 1)
    }
  }

  /** The slot of (kind, id) without claiming one, or -1. */
  private find (kind: number, hi: number, lo: number): number {
    const c = this.cells
    let s = this.home(kind, hi, lo)
    for (let n = 0; n < this.probeLimit; n++) {
      const b = s * this.width
      const k = Atomics.load(c, b + KIND)
      if (k === 0) return -1
      if (k === kind && Atomics.load(c, b + HI) === hi && Atomics.load(c, b + LO) === lo) return b
      if (++s === this.slots) s = 0
    }
    return -1
  }

  /**
   * Locks the slot of (kind, id) and returns the index of its payload; a new key gets an empty
   * slot or one `idle` says may be reused (its payload zeroed first). -1 when no slot could be
   * found or claimed (table full). Every acquire that succeeded is followed by `release`.
   */
  acquire (kind: number, id: number, idle: (cells: Int32Array, base: number) => boolean): number {
    const hi = Math.floor(id / 0x1_0000_0000) | 0
    const lo = id | 0
    const c = this.cells
    for (;;) {
      let b = this.find(kind, hi, lo)
      if (b < 0) b = this.claim(kind, hi, lo, idle)
      if (b < 0) return -1
      this.lock(c, b + LOCK)
      // Reused for another key between find and lock: look again.
      if (c[b + KIND] === kind && c[b + HI] === hi && c[b + LO] === lo) return b + PAYLOAD
      this.unlock(c, b + LOCK)
    }
  }

  /** Unlocks the slot whose payload `acquire` returned. */
  release (payload: number): void { this.unlock(this.cells, payload - PAYLOAD + LOCK) }

  /** `fn(cells, payload)` under the slot's lock (acquire/release); `full` when the table is full. */
  with<T> (kind: number, id: number, idle: (cells: Int32Array, base: number) => boolean, fn: (cells: Int32Array, base: number) => T, full: T): T {
    const b = this.acquire(kind, id, idle)
    if (b < 0) return full
    try { return fn(this.cells, b) } finally { this.release(b) }
  }

  /** Under the table lock: the key's slot if another thread claimed it meanwhile, else a free or idle slot made the key's. */
  private claim (kind: number, hi: number, lo: number, idle: (cells: Int32Array, base: number) => boolean): number {
    const c = this.cells
    this.lock(this.guard, TABLE_LOCK)
    try {
      let s = this.home(kind, hi, lo)
      let reuse = -1
      for (let n = 0; n < this.probeLimit; n++) {
        const b = s * this.width
        const k = c[b + KIND]
        if (k === kind && c[b + HI] === hi && c[b + LO] === lo) {
          if (reuse >= 0) this.unlock(c, reuse + LOCK)
          return b
        }
        if (k === 0) {
          // Slots are never emptied again, so the key cannot lie past an empty one.
          if (reuse < 0) { this.lock(c, b + LOCK); reuse = b }
          break
        }
        if (reuse < 0) {
          this.lock(c, b + LOCK)
          if (idle(c, b + PAYLOAD)) reuse = b
          else this.unlock(c, b + LOCK)
        }
        if (++s === this.slots) s = 0
      }
      if (reuse < 0) return -1
      // Still locked: no thread counts in it while it changes hands.
      c.fill(0, reuse + PAYLOAD, reuse + this.width)
      Atomics.store(c, reuse + HI, hi)
      Atomics.store(c, reuse + LO, lo)
      Atomics.store(c, reuse + KIND, kind)
      this.unlock(c, reuse + LOCK)
      return reuse
    } finally { this.unlock(this.guard, TABLE_LOCK) }
  }

  /** Keys held (tests, metrics): slots with a key whose payload is not idle. */
  count (idle: (cells: Int32Array, base: number) => boolean): number {
    let n = 0
    for (let s = 0; s < this.slots; s++) {
      const b = s * this.width
      if (Atomics.load(this.cells, b + KIND) !== 0 && !idle(this.cells, b + PAYLOAD)) n++
    }
    return n
  }
}

/** Bucket strings (`k12`, `a7`, `u3`) as exact (kind, id) keys; anything else is hashed to kind 1 (never produced today). */
export function bucketKey (bucket: string): { kind: number; id: number } {
  const kind = bucket.charCodeAt(0)
  const n = bucket.length
  // `k` + digits without a leading zero (exactly what src/http/auth.ts builds), up to 15 digits.
  if (kind >= 97 && kind <= 122 && n > 1 && n < 17 && (n === 2 || bucket.charCodeAt(1) !== 48)) {
    let id = 0
    let i = 1
    for (; i < n; i++) {
      const d = bucket.charCodeAt(i) - 48
      if (d < 0 || d > 9) break
      id = id * 10 + d
    }
    if (i === n) return { kind, id }
  }
  let h = 0x811c9dc5
  for (let i = 0; i < n; i++) h = Math.imul(h ^ bucket.charCodeAt(i), 0x01000193)
  return { kind: 1, id: h >>> 0 }
}
