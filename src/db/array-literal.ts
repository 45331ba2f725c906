/**
 * PostgreSQL array literals built in one pass (docs/decisions.md "Creation CPU"), for the
 * column arrays a multi-row statement unnests. postgres.js serialises an array parameter
 * element by element with two regular-expression replaces each; a literal passed as a string
 * to a `text[]` or `bigint[]` parameter is sent as it is. Every text element is quoted, so
 * any text (commas, braces, spaces, the word NULL) reads back unchanged; only `"` and `\`
 * are escaped, and only in the elements that hold one.
 */

const NEEDS_ESCAPE = /["\\]/

/** `{"a","b\"c",NULL}`: a text array literal. */
export function textArray (xs: ReadonlyArray<string | null>): string {
  let out = '{'
  for (let i = 0; i < xs.length; i++) {
    const x = xs[i]
    if (i > 0) out += ','
    if (x === null) out += 'NULL'
    // Two string replaces, not one regular expression with `$&`: V8's regular-expression
    // replace builds its result from a list of parts, twice the CPU and garbage of replaceAll's
    // search for a fixed string (a JSON document holds dozens of quotes).
    else out += NEEDS_ESCAPE.test(x) ? `"${x.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"` : `"${x}"`
  }
  return out + '}'
}

/** `{1,2,NULL}`: an integer array literal (finite numbers only; callers pass integers). */
export function numberArray (xs: ReadonlyArray<number | null>): string {
  let out = '{'
  for (let i = 0; i < xs.length; i++) {
    const x = xs[i]
    if (i > 0) out += ','
    out += x === null ? 'NULL' : String(x)
  }
  return out + '}'
}
