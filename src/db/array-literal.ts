/**
 * PostgreSQL array literals built in one pass (docs/decisions.md "Creation CPU"), for the
 * column arrays a multi-row statement unnests. postgres.js serialises an array parameter
 * element by element with two regular-expression replaces each; a literal passed as a string
 * to a `text[]` or `bigint[]` parameter is sent as it is. Every text element is quoted, so
 * any text (commas, braces, spaces, the word NULL) reads back unchanged; only `"` and `\`
 * are escaped, and only in the elements that hold one.
 */

const NEEDS_ESCAPE = /["\\]/
/** What JSON.stringify would write other than as itself: control characters (and any surrogate, lone ones among them). */
const NOT_AS_ITSELF = /[\u0000-\u001f\ud800-\udfff]/

/**
 * `{"a","b\"c",NULL}`: a text array literal. An element with a quote or a backslash (every
 * JSON document) is escaped by JSON.stringify when that writes nothing else differently: it
 * escapes exactly `"` and `\` then, in one native pass and one string, where a replace makes a
 * string part per quote (a JSON document holds dozens). Elements with control characters or
 * surrogates are escaped by two replaces.
 */
export function textArray (xs: ReadonlyArray<string | null>): string {
  let out = '{'
  for (let i = 0; i < xs.length; i++) {
    const x = xs[i]
    if (i > 0) out += ','
    if (x === null) out += 'NULL'
    else if (!NEEDS_ESCAPE.test(x)) out += `"${x}"`
    else if (!NOT_AS_ITSELF.test(x)) out += JSON.stringify(x)
    else out += `"${x.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`
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
