/**
 * A map bounded by an estimate of the heap its entries hold (every cache keyed by
 * user input is bounded in bytes, not entries). Order is recency of `set` (a Map keeps
 * insertion order; `set` re-inserts); `get` does not reorder, so hot paths pay one lookup.
 * Callers that want read recency re-`set` what they use (the credential caches do, at every
 * background reload). Past the budget the least recently set entries go first.
 */

/**
 * Heap of one string as V8 keeps it: a header plus one byte a character when every character
 * fits Latin-1, two otherwise (measured on Node 20: 16-byte header, rounded to 8).
 */
export function stringBytes (s: string): number {
  let wide = false
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0xff) { wide = true; break }
  return 16 + Math.ceil(s.length * (wide ? 2 : 1) / 8) * 8
}

export class ByteLru<K, V> {
  private readonly map = new Map<K, { v: V; bytes: number }>()
  private total = 0

  /** `sizeOf`: estimated heap of one entry, key, value and map slot included. */
  constructor (readonly budget: number, private readonly sizeOf: (k: K, v: V) => number) {}

  get size (): number { return this.map.size }
  /** Estimated bytes held; never above `budget` after a `set`. */
  get bytes (): number { return this.total }

  get (k: K): V | undefined { return this.map.get(k)?.v }
  has (k: K): boolean { return this.map.has(k) }

  /** Inserts as most recent; an entry larger than the whole budget is not kept. */
  set (k: K, v: V): void {
    this.delete(k)
    const bytes = this.sizeOf(k, v)
    if (bytes > this.budget) return
    this.map.set(k, { v, bytes })
    this.total += bytes
    while (this.total > this.budget) this.delete(this.map.keys().next().value as K)
  }

  delete (k: K): boolean {
    const e = this.map.get(k)
    if (e === undefined) return false
    this.total -= e.bytes
    return this.map.delete(k)
  }

  clear (): void { this.map.clear(); this.total = 0 }

  entries (): IterableIterator<[K, { v: V; bytes: number }]> { return this.map.entries() }
}
