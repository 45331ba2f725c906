// src/db/array-literal.ts: text array literals read back by PostgreSQL exactly as written, for
// any text (quotes, backslashes, braces, commas, NULL the word, control characters, lone
// surrogates replaced as PostgreSQL must), with each escaping path taken; and the JSON.stringify
// path writes the same bytes as the plain two-replace escaping wherever it is used.
import t from 'tap'
import postgres from 'postgres'
import { numberArray, textArray } from '../../src/db/array-literal.js'
import { freshDatabase } from '../helpers/db.js'

/** The plain escaping: every `\` and `"` backslashed, nothing else touched. */
const reference = (xs: ReadonlyArray<string | null>): string =>
  `{${xs.map(x => x === null ? 'NULL' : `"${x.replace(/["\\]/g, '\\$&')}"`).join(',')}}`

/** Deterministic pseudo-random strings over an alphabet that holds every case. */
function strings (n: number, seed = 7): string[] {
  const alphabet = ['a', 'Z', '0', ' ', ',', '{', '}', '"', '\\', '\n', '\t', '\u0001', '\u001f', '\u007f', 'é', '\u2028', '😀', 'NULL', '\\"', '{"k":"v"}', '/']
  let s = seed
  const next = () => { s = (s * 1103515245 + 12345) % 2147483648; return s }
  return Array.from({ length: n }, () => Array.from({ length: next() % 24 }, () => alphabet[next() % alphabet.length]).join(''))
}

t.test('the same literal as the plain escaping, for every kind of element', async (t) => {
  const xs = [...strings(3000), JSON.stringify({ a: 'b"c\\d', e: [1, null, 'x\ny'], f: '\u0000' }), '', null]
  const wrong = xs.filter(x => textArray([x]) !== reference([x]))
  t.same(wrong, [], 'every element escaped as the plain escaping does')
  t.equal(textArray(xs), reference(xs))
  t.equal(textArray([]), '{}')
  t.equal(numberArray([1, null, -2]), '{1,NULL,-2}')
})

t.test('textArray escapes quotes and backslashes only where they are', async (t) => {
  t.equal(textArray(['a', null, 'b"c', 'd\\e', '{"k":"v\\"w"}', '']), '{"a",NULL,"b\\"c","d\\\\e","{\\"k\\":\\"v\\\\\\"w\\"}",""}')
  t.equal(textArray([]), '{}')
})

t.test('PostgreSQL reads every element back unchanged', async (t) => {
  const url = await freshDatabase(t)
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  t.teardown(() => sql.end({ timeout: 1 }))
  // PostgreSQL text cannot hold U+0000, so no element carries one here (callers never send it).
  const xs: Array<string | null> = [...strings(2000, 11), JSON.stringify({ q: 'say "hi"\\n', list: ['{', '}', ','] }), 'NULL', '', null]
  // Read back row by row (unnest), as the batch statements read them: the driver's own parser
  // of array results takes an element NULL for the text 'NULL'.
  const rows = await sql.unsafe<Array<{ x: string | null }>>('SELECT x FROM unnest($1::text[]) WITH ORDINALITY AS u(x, i) ORDER BY i', [textArray(xs)])
  t.same(rows.map(r => r.x), xs)
})
