// The routing file (docs/providers.md "Routing"): validation at boot with
// errors naming the mistake, the declarative input mapping, and the shipped example.
import { readFileSync } from 'node:fs'
import t from 'tap'
import { CATALOGUE_MODEL_IDS, loadRouting, mapInput, parseRouting } from '../../src/providers/routing.js'

const ALL_CREDS = { FAL_KEY: 'k', REPLICATE_API_TOKEN: 'r', KIE_API_KEY: 'q' }

t.test('mistakes are boot errors that name the model, route and fix', async (t) => {
  t.throws(() => parseRouting([], ALL_CREDS), /must be a JSON object/)
  t.throws(() => parseRouting({ routes: { 'veo9': [{ provider: 'fal', model: 'x' }] } }, ALL_CREDS), /unknown model id "veo9"/)
  t.throws(() => parseRouting({ routes: { 'veo3-fast': [{ provider: 'runway', model: 'x' }] } }, ALL_CREDS), /routes\.veo3-fast\[0\]: unknown provider "runway"/)
  t.throws(() => parseRouting({ routes: { 'veo3-fast': [{ provider: 'fal', model: 'x' }] } }, {}), /provider fal needs FAL_KEY/)
  t.throws(() => parseRouting({ routes: { 'veo3-fast': [{ provider: 'simulated' }, { provider: 'kie', model: 'x' }] } }, { FAL_KEY: 'k' }), /\[1\]: provider kie needs KIE_API_KEY/)
  t.throws(() => parseRouting({ routes: { 'veo3-fast': [] } }, ALL_CREDS), /non-empty array/)
  t.throws(() => parseRouting({ routes: { 'veo3-fast': [{ provider: 'fal', model: '' }] } }, ALL_CREDS), /"model"/)
  t.throws(() => parseRouting({ routes: { 'veo3-fast': [{ provider: 'fal', model: 'x', max_concurrent: 0 }] } }, ALL_CREDS), /max_concurrent must be an integer >= 1/)
  t.throws(() => parseRouting({ routes: { 'veo3-fast': [{ provider: 'fal', model: 'x', colour: 1 }] } }, ALL_CREDS), /unknown key "colour"/)
  t.throws(() => parseRouting({ routes: { 'veo3-fast': [{ provider: 'fal', model: 'x', input: { p: '$prompt' } }] } }, ALL_CREDS), /input\.p: bad path/)
  t.throws(() => parseRouting({ routes: { 'veo3-fast': [{ provider: 'fal', model: 'x', input: { d: { from: '$.duration', as: 'float' } } }] } }, ALL_CREDS), /as must be/)
  t.throws(() => loadRouting('/nonexistent/providers.json', ALL_CREDS), /cannot read/)
  t.equal(loadRouting(undefined, {}), null, 'no file: every model simulated')
  const ok = parseRouting({ routes: { 'veo3-fast': [{ provider: 'simulated', max_concurrent: 2 }] } }, {})
  t.same(ok.routes['veo3-fast'], [{ provider: 'simulated', model: 'simulated', max_concurrent: 2 }], 'simulated needs no credential and no model')
})

t.test('input mapping: paths, literals, conversions, defaults; absent fields left out', async (t) => {
  const req = { model: 'veo3-fast', prompt: 'ignored', aspect_ratio: '16:9', duration: '8', image_url: null, reference_image_urls: ['https://a/1.png', 'https://a/2.png'], webhook_url: 'https://me', credits: 120 }
  const m = mapInput({
    prompt: '$.prompt',
    ar: { from: '$.aspect_ratio', map: { '16:9': 'landscape' } },
    seconds: { from: '$.duration', as: 'number' },
    dur: { from: '$.duration', suffix: 's' },
    image: '$.image_url',
    first_ref: '$.reference_image_urls[0]',
    res: { from: '$.resolution', default: '720p' },
    fps: 24,
    nested: { a: '$.aspect_ratio', b: [1, '$.duration'] },
  }, req, 'a red fox')
  t.same(m, { prompt: 'a red fox', ar: 'landscape', seconds: 8, dur: '8s', first_ref: 'https://a/1.png', res: '720p', fps: 24, nested: { a: '16:9', b: [1, '8'] } })
  t.same(mapInput(undefined, req, 'a red fox'), { prompt: 'a red fox', aspect_ratio: '16:9', duration: '8', reference_image_urls: ['https://a/1.png', 'https://a/2.png'] },
    'default mapping: our set fields, never our bookkeeping (webhook, credits, model)')
})

t.test('the shipped example maps every catalogue model id and validates', async (t) => {
  const doc = JSON.parse(readFileSync(new URL('../../../config/providers.example.json', import.meta.url), 'utf8'))
  const table = parseRouting(doc, ALL_CREDS)
  t.same(Object.keys(table.routes).sort(), [...CATALOGUE_MODEL_IDS].sort(), 'every catalogue model id is routed')
  const providers = new Set(Object.values(table.routes).flat().map(r => r.provider))
  t.same([...providers].sort(), ['fal', 'kie', 'replicate'], 'routes on all three providers')
  t.throws(() => parseRouting(doc, { FAL_KEY: 'k', REPLICATE_API_TOKEN: 'r' }), /needs KIE_API_KEY/, 'without a credential it names the one missing')
})
