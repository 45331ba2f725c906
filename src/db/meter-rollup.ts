/**
 * The per-account daily rollup of metered requests (usage_daily), folded during the metering
 * flush without allocating per row or per flush (the flush runs on the main thread
 * between requests, and what it allocates while its COPY is in flight survives young
 * collections and is promoted). Two parts:
 *
 * - MeterLabels, one per EndpointTable and kept across flushes: every distinct endpoint label
 *   (`METHOD path`) gets a small number once, with its COPY binary fields built once. A
 *   suffixed endpoint (a route metered by requested path) gets one per suffix string; a raw one
 *   (an unmatched URL) one per label text. Bounded: past MAX_LABELS the table starts again at
 *   the next flush.
 * - RollupGroups: (day, account, label) -> counters in typed arrays, reset per flush.
 */
import { CopyBinary, field } from './copy-binary.js'
import type { EndpointTable, MeterColumns } from './metering.js'

/** Labels kept across flushes (a suffixed route adds one per distinct path, job ids: ~300 bytes each). */
export const MAX_LABELS = 20_000
/** Label numbers and accounts share one numeric group key below 2^53. */
const LABEL_SPACE = 2 ** 20
const MAX_KEYED_ACCOUNT = 2 ** 33

export class MeterLabels {
  /** Per label: the method and endpoint columns of request_log as COPY binary fields, one buffer. */
  readonly fields: Buffer[] = []
  /** Per label: usage_daily.endpoint (`METHOD path`) as a COPY binary field. */
  readonly labelFields: Buffer[] = []
  private epLabel: number[] = []
  private sfxLabel = new Map<number, Map<string, number>>()
  private byText = new Map<string, number>()
  /** Flushes using the numbers now (concurrent writeMeterBatch calls may share one table). */
  users = 0

  constructor (private readonly endpoints: EndpointTable) {}

  get size (): number { return this.fields.length }

  /** Starts again when the table outgrew its bound, while no flush holds numbers from it. */
  trim (): void {
    if (this.fields.length <= MAX_LABELS || this.users > 0) return
    this.fields.length = 0
    this.labelFields.length = 0
    this.epLabel = []
    this.sfxLabel = new Map()
    this.byText = new Map()
  }

  /** One number per label text: a suffixed row and a raw row may name the same endpoint. */
  private label (label: string, method: string, endpoint: string): number {
    let id = this.byText.get(label)
    if (id === undefined) {
      id = this.fields.length
      this.fields.push(Buffer.concat([field(method), field(endpoint)]))
      this.labelFields.push(field(label))
      this.byText.set(label, id)
    }
    return id
  }

  /** The label number of row `i` of `c`. */
  of (c: MeterColumns, i: number): number {
    const ep = c.ep[i]
    const e = this.endpoints
    if (ep >= 0 && !e.suffixed[ep]) return (this.epLabel[ep] ??= this.label(e.label[ep], e.method[ep], e.path[ep]))
    const tail = c.rawEndpoint[i]!
    if (ep >= 0) {
      let m = this.sfxLabel.get(ep)
      if (m === undefined) this.sfxLabel.set(ep, m = new Map())
      let id = m.get(tail)
      if (id === undefined) m.set(tail, id = this.label(e.label[ep] + tail, e.method[ep], e.path[ep] + tail))
      return id
    }
    const method = c.rawMethod[i]!
    return this.label(`${method} ${tail}`, method, tail)
  }
}

const labelTables = new WeakMap<EndpointTable, MeterLabels>()
/** The label table of `endpoints`, made on first use. */
export function labelsOf (endpoints: EndpointTable): MeterLabels {
  let l = labelTables.get(endpoints)
  if (l === undefined) labelTables.set(endpoints, l = new MeterLabels(endpoints))
  return l
}

/** Days since 1970-01-01 to PostgreSQL's date epoch, 2000-01-01. */
const PG_EPOCH_DAYS = 10_957

export class RollupGroups {
  length = 0
  day = new Int32Array(1024)
  account = new Float64Array(1024)
  label = new Int32Array(1024)
  requests = new Float64Array(1024)
  errors = new Float64Array(1024)
  credits = new Float64Array(1024)
  latency = new Float64Array(1024)
  /** Group index by `account * LABEL_SPACE + label`, one map per day (a flush rarely spans two). */
  private byDay = new Map<number, Map<number, number>>()
  /** Groups of accounts too large for the numeric key. */
  private byText = new Map<string, number>()

  reset (): void {
    this.length = 0
    for (const m of this.byDay.values()) m.clear()
    if (this.byDay.size > 2) this.byDay.clear()
    this.byText.clear()
  }

  add (dayNum: number, account: number, label: number, status: number, credits: number, latency: number): void {
    let g: number | undefined
    if (account >= 0 && account < MAX_KEYED_ACCOUNT) {
      let m = this.byDay.get(dayNum)
      if (m === undefined) this.byDay.set(dayNum, m = new Map())
      const k = account * LABEL_SPACE + label
      g = m.get(k)
      if (g === undefined) { g = this.push(dayNum, account, label); m.set(k, g) }
    } else {
      const k = `${dayNum} ${account} ${label}`
      g = this.byText.get(k)
      if (g === undefined) { g = this.push(dayNum, account, label); this.byText.set(k, g) }
    }
    this.requests[g]++
    if (status >= 400) this.errors[g]++
    this.credits[g] += credits
    this.latency[g] += latency
  }

  private push (dayNum: number, account: number, label: number): number {
    if (this.length === this.day.length) this.grow()
    const g = this.length++
    this.day[g] = dayNum; this.account[g] = account; this.label[g] = label
    this.requests[g] = 0; this.errors[g] = 0; this.credits[g] = 0; this.latency[g] = 0
    return g
  }

  private grow (): void {
    const n = this.day.length * 2
    const i32 = (a: Int32Array) => { const b = new Int32Array(n); b.set(a); return b }
    const f64 = (a: Float64Array) => { const b = new Float64Array(n); b.set(a); return b }
    this.day = i32(this.day); this.label = i32(this.label)
    this.account = f64(this.account); this.requests = f64(this.requests); this.errors = f64(this.errors)
    this.credits = f64(this.credits); this.latency = f64(this.latency)
  }

  /** The groups as a binary COPY of usage_stage (account_id, day, endpoint, requests, errors, credits, latency_ms_sum). */
  encode (labels: MeterLabels): Buffer {
    const w = new CopyBinary(64 + this.length * 96)
    w.header()
    for (let g = 0; g < this.length; g++) {
      const lf = labels.labelFields[this.label[g]]
      w.row(7, 7 * 4 + 5 * 8 + 4 + lf.length)
      w.int64(this.account[g])
      w.int32(this.day[g] - PG_EPOCH_DAYS)
      w.raw(lf)
      w.int64(this.requests[g])
      w.int64(this.errors[g])
      w.int64(this.credits[g])
      w.float8(this.latency[g])
    }
    w.trailer()
    return w.buf.subarray(0, w.pos)
  }
}
