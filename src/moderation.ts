import { inflateSync } from 'node:zlib'

/**
 * The content screen (docs/api.md "Uploads"; extra terms from MODERATION_TERMS, docs/operations.md
 * "Configuration"): a term list matched against text. Prompts are screened by the job
 * engine; image uploads by src/http/routes/uploads.ts (file name and embedded text metadata).
 * A hit answers 403 CONTENT_POLICY_VIOLATION.
 *
 * Matching is on words, not substrings: text and terms are NFKC-normalised, lower-cased and
 * every run of characters that is not a letter or digit becomes one space, then a term matches
 * when its word sequence appears in the text's. So `CSAM` and `csam.png` match "csam",
 * `Child-Sexual` and `child_sexual` match "child sexual", while "classamples" does not match
 * "csam". Deliberately simple and predictable: no fuzzy matching, no image recognition.
 */
export const BUILTIN_TERMS: readonly string[] = Object.freeze([
  'csam',
  'child sexual',
  'child porn',
  'underage porn',
  'underage nude',
  'beheading video',
  'snuff film',
  'bestiality',
  'revenge porn',
  'terrorist recruitment',
  // Harmless marker that always fails the screen, so tests and operators can exercise it.
  'forbidden-test-term',
])

/** Lower-case words separated by single spaces, with a space at each end. */
export function normalizeForScreen (text: string): string {
  return ` ${text.normalize('NFKC').toLowerCase().replace(/[^\p{L}\p{N}]+/gu, ' ').trim()} `
}

const builtin = BUILTIN_TERMS.map(normalizeForScreen)

/**
 * The first term (built-in list, then `extraTerms` from MODERATION_TERMS) that `text`
 * contains as a whole word sequence, or null when the text passes. Returns the term as listed.
 */
export function screenText (text: string, extraTerms: readonly string[] = []): string | null {
  if (!text) return null
  const t = normalizeForScreen(text)
  for (let i = 0; i < builtin.length; i++) {
    if (builtin[i] !== '  ' && t.includes(builtin[i])) return BUILTIN_TERMS[i]
  }
  for (const term of extraTerms) {
    const n = normalizeForScreen(term)
    if (n !== '  ' && t.includes(n)) return term
  }
  return null
}

/**
 * Budgets of the metadata reader (docs/operations.md "Hostile input"): at most this much text
 * in all (inflated zTXt/iTXt chunks included, together, not each) and this much time. An
 * image that needs more is refused rather than screened in part: a term hidden past the
 * budget would otherwise pass.
 */
export const METADATA_TEXT_BUDGET = 2 * 1024 * 1024
export const METADATA_TIME_BUDGET_MS = 1000

/** Why an image's metadata was not read to the end. */
export class MetadataBudgetExceeded extends Error {
  constructor (readonly budget: 'bytes' | 'time') { super(`image metadata exceeds its ${budget} budget`) }
}

/** The reader's running totals: text kept so far and the deadline. */
class Budget {
  left = METADATA_TEXT_BUDGET
  constructor (private readonly deadline: number) {}
  /** Counts `n` characters of text; past the budget or the deadline the read stops. */
  take (n: number): void {
    this.left -= n
    if (this.left < 0) throw new MetadataBudgetExceeded('bytes')
    if (performance.now() > this.deadline) throw new MetadataBudgetExceeded('time')
  }
}

/** Runs of at least 4 printable ASCII characters, and of UTF-16LE ones (Exif XP* tags). */
function printable (buf: Buffer): string {
  const s = buf.toString('latin1')
  const out: string[] = []
  for (const m of s.matchAll(/[\x20-\x7e]{4,}/g)) out.push(m[0])
  for (const m of s.matchAll(/(?:[\x20-\x7e]\x00){4,}/g)) out.push(m[0].replace(/\x00/g, ''))
  return out.join('\n')
}

/** A compressed text chunk, inflated within what is left of the budget; a corrupt one reads as nothing. */
function inflate (buf: Buffer, budget: Budget): string {
  let text: Buffer
  try {
    text = inflateSync(buf, { maxOutputLength: Math.max(1, budget.left) })
  } catch (e) {
    if ((e as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') throw new MetadataBudgetExceeded('bytes')
    return ''
  }
  budget.take(text.length)
  return text.toString('utf8')
}

function pngText (buf: Buffer, out: string[], budget: Budget): void {
  let at = 8
  while (at + 12 <= buf.length) {
    const len = buf.readUInt32BE(at)
    const type = buf.toString('latin1', at + 4, at + 8)
    const data = buf.subarray(at + 8, Math.min(buf.length, at + 8 + len))
    if (type === 'tEXt') { budget.take(data.length); out.push(data.toString('latin1').replace(/\x00/g, ' ')) } else if (type === 'zTXt') {
      const nul = data.indexOf(0)
      if (nul >= 0) out.push(data.toString('latin1', 0, nul), inflate(data.subarray(nul + 2), budget))
    } else if (type === 'iTXt') {
      // keyword \0 compression-flag method language \0 translated-keyword \0 text
      const k = data.indexOf(0)
      if (k >= 0 && k + 3 <= data.length) {
        const compressed = data[k + 1] === 1
        const lang = data.indexOf(0, k + 3)
        const trans = lang >= 0 ? data.indexOf(0, lang + 1) : -1
        if (trans >= 0) {
          const text = data.subarray(trans + 1)
          if (!compressed) budget.take(text.length)
          out.push(data.toString('latin1', 0, k), data.toString('utf8', lang + 1, trans), compressed ? inflate(text, budget) : text.toString('utf8'))
        }
      }
    } else if (type === 'eXIf') { budget.take(data.length); out.push(printable(data)) } else if (type === 'IEND') break
    else budget.take(0) // the deadline, between chunks
    at += 12 + len
  }
}

function jpegText (buf: Buffer, out: string[], budget: Budget): void {
  let at = 2
  while (at + 4 <= buf.length && buf[at] === 0xff) {
    const marker = buf[at + 1]
    if (marker === 0xd8 || (marker >= 0xd0 && marker <= 0xd7) || marker === 0x01 || marker === 0xff) { at += marker === 0xff ? 1 : 2; continue }
    if (marker === 0xda || marker === 0xd9) break // image data follows: no more metadata segments
    const len = buf.readUInt16BE(at + 2)
    const data = buf.subarray(at + 4, Math.min(buf.length, at + 2 + len))
    if (marker === 0xfe) { budget.take(data.length); out.push(data.toString('utf8')) } else if (marker >= 0xe0 && marker <= 0xef) { budget.take(data.length); out.push(printable(data)) } // COM; APPn: Exif, XMP, IPTC
    at += 2 + len
  }
}

function webpText (buf: Buffer, out: string[], budget: Budget): void {
  let at = 12
  while (at + 8 <= buf.length) {
    const fourcc = buf.toString('latin1', at, at + 4)
    const len = buf.readUInt32LE(at + 4)
    if (fourcc === 'EXIF' || fourcc === 'XMP ') {
      const data = buf.subarray(at + 8, Math.min(buf.length, at + 8 + len))
      budget.take(data.length)
      out.push(printable(data))
    }
    at += 8 + len + (len & 1)
  }
}

/** XMP packets are plain XML wherever they sit (AVIF keeps them in `mdat` items). */
function xmpText (buf: Buffer, out: string[], budget: Budget): void {
  let from = 0
  for (;;) {
    const start = buf.indexOf('<x:xmpmeta', from, 'latin1')
    if (start < 0) return
    const end = buf.indexOf('</x:xmpmeta>', start, 'latin1')
    const stop = end < 0 ? Math.min(buf.length, start + Math.max(1, budget.left + 1)) : end
    budget.take(stop - start)
    out.push(buf.toString('utf8', start, stop))
    from = stop
  }
}

/**
 * The text an image carries besides its pixels, for the upload screen: PNG tEXt/zTXt/iTXt
 * and eXIf chunks, JPEG comments and APPn segments (Exif, XMP, IPTC strings), WebP EXIF and
 * XMP chunks, and XMP packets in any format (AVIF). Pixels are not analysed.
 */
export function imageMetadataText (buf: Buffer, format: string, timeBudgetMs = METADATA_TIME_BUDGET_MS): string {
  const budget = new Budget(performance.now() + timeBudgetMs)
  const out: string[] = []
  try {
    if (format === 'png' || format === 'apng') pngText(buf, out, budget)
    else if (format === 'jpg') jpegText(buf, out, budget)
    else if (format === 'webp') webpText(buf, out, budget)
  } catch (e) {
    // A malformed structure ends the walk with what was read; a budget ends the read.
    if (e instanceof MetadataBudgetExceeded) throw e
  }
  xmpText(buf, out, budget)
  return out.join('\n')
}
