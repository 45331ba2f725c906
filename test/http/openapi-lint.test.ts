// The served /v1/openapi.json passes Redocly's `recommended` rules (the rule set the
// Redocly CLI lints with by default) with no error, and the warnings left are the ones the
// document means to have. Outside tools (Redocly, Spectral, Prism, generators) read this
// document; this keeps what they find at zero as routes are added.
import t from 'tap'
import { createConfig, lintFromString } from '@redocly/openapi-core'
import { ERRORS } from '../../src/errors.js'
import { startServer } from '../helpers/server.js'

// A deployment's PUBLIC_BASE_URL (the test default, localhost, is itself a Redocly warning).
const s = await startServer(t, { PUBLIC_BASE_URL: 'https://api.genjobs.test' })
const source = (await s.req('GET', '/v1/openapi.json')).text
const doc = JSON.parse(source)
const config = await createConfig({ extends: ['recommended'] })

interface Problem { ruleId: string; severity: string; message: string; pointer: string }

async function lint (text: string): Promise<Problem[]> {
  const found = await lintFromString({ source: text, absoluteRef: 'openapi.json', config })
  return found.map(p => ({ ruleId: p.ruleId, severity: p.severity, message: p.message, pointer: p.location[0]?.pointer ?? '' }))
}

/** The operation a `#/paths/~1x/get/responses` pointer names. */
function operationAt (pointer: string): Record<string, any> | undefined {
  const [, path, method] = /^#\/paths\/([^/]+)\/([^/]+)/.exec(pointer) ?? []
  if (!path) return undefined
  return doc.paths[path.replace(/~1/g, '/').replace(/~0/g, '~')]?.[method]
}

t.test('Redocly recommended: no error, and only the warnings the document means to have', async (t) => {
  const problems = await lint(source)
  t.same(problems.filter(p => p.severity === 'error'), [], 'no error')
  const unexplained = problems.filter(p => p.severity !== 'error').filter(p => {
    // The project names no license (package.json is private and has none): nothing to put there.
    if (p.ruleId === 'info-license' && p.pointer === '#/info') return false
    // Public reads that answer no 4xx at all (the index, health, the catalogue, the docs page):
    // declaring one they never send would be a lie. Checked against what the route can answer.
    if (p.ruleId === 'operation-4xx-response') {
      const op = operationAt(p.pointer)
      const codes: string[] = op?.['x-error-codes'] ?? ['?']
      return codes.some(c => { const st = ERRORS[c as keyof typeof ERRORS]?.status ?? 400; return st >= 400 && st < 500 })
    }
    return true
  })
  t.same(unexplained, [], 'no other warning')
})

t.test('the check bites: the mistakes outside tools found are reported again when put back', async (t) => {
  const broken = structuredClone(doc)
  delete broken.webhooks['job.completed'].post.security
  broken.paths['/openapi.json'].get.responses['200'].content['application/json'].schema = { type: 'object', required: ['openapi'] }
  broken.tags.find((x: any) => x.name === 'Files').description = undefined
  const problems = await lint(JSON.stringify(broken))
  const rules = new Set(problems.map(p => p.ruleId))
  t.ok(problems.some(p => p.ruleId === 'security-defined' && p.severity === 'error'), 'a webhook without security is an error')
  t.ok(rules.has('no-required-schema-properties-undefined'), '`required` without properties is reported')
  t.ok(rules.has('tag-description'), 'an undescribed tag is reported')
})
