// src/util/iso-time.ts: the cached-second ISO formatter gives Date#toISOString's text exactly,
// across second, minute, day and year boundaries, out of its range, and for invalid dates.
import t from 'tap'
import { isoOf, isoOfMs } from '../../src/util/iso-time.js'

t.test('same text as toISOString around boundaries', async (t) => {
  const starts = [0, 999, 1000, Date.UTC(2026, 11, 31, 23, 59, 59, 998), Date.UTC(2024, 1, 29, 12, 0, 0, 0), Date.now(), 253402300799000]
  let checked = 0
  const wrong: string[] = []
  for (const s of starts) {
    // Includes times before 1970 (the fallback) and both sides of every boundary above.
    for (let ms = s - 1500; ms <= s + 1500; ms += 7) {
      if (isoOfMs(ms) !== new Date(ms).toISOString()) wrong.push(`${ms}: ${isoOfMs(ms)}`)
      checked++
    }
  }
  t.same(wrong, [], 'every time formats as toISOString does')
  // Going back to an earlier second after a later one formats the earlier one anew.
  t.equal(isoOfMs(5_000), '1970-01-01T00:00:05.000Z')
  t.equal(isoOfMs(4_999), '1970-01-01T00:00:04.999Z')
  t.equal(isoOf(new Date(86_400_000 + 61_001)), '1970-01-02T00:01:01.001Z')
  t.ok(checked > 2000)
})

t.test('outside the four-digit years, and invalid dates, behave as toISOString', async (t) => {
  t.equal(isoOfMs(253402300800000), new Date(253402300800000).toISOString()) // +010000-01-01
  t.equal(isoOfMs(-62198755200000), new Date(-62198755200000).toISOString()) // -000001
  t.throws(() => isoOf(new Date(NaN)), RangeError)
  t.throws(() => isoOfMs(Infinity), RangeError)
})
