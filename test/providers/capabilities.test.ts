// The capability rules of src/providers/capabilities.ts (docs/providers.md "Capabilities"),
// pure: which request fields count as set, what a mapping reads, and when a route serves.
import t from 'tap'
import { carriedFields, fieldsRead, unserved } from '../../src/providers/capabilities.js'
import type { RouteSpec } from '../../src/providers/routing.js'
import { loadUpstreamSchema } from '../../src/providers/upstream-schemas.js'

const video = (over: Record<string, unknown> = {}) => ({
  kind: 'video', model: 'kling-3.0', prompt: 'p', aspect_ratio: '16:9', duration: '6', resolution: null, mode: 'std',
  image_url: null, last_frame_url: null, reference_image_urls: [], reference_video_urls: [], reference_audio_urls: [],
  generate_audio: null, sound: null, multi_shots: null, multi_prompt: null, kling_elements: null, audio_url: null, lip_sync_mode: null, ...over,
})

t.test('a value equal to the model default, null or an empty list is not set', async (t) => {
  t.same(carriedFields('kling-3.0', video()), [], 'the default request carries nothing')
  t.same(carriedFields('kling-3.0', video({ aspect_ratio: '9:16', mode: 'pro', image_url: 'https://a/b.png' })).sort(), ['aspect_ratio', 'image_url', 'mode'])
  t.same(carriedFields('nano-banana', { kind: 'image', aspect_ratio: 'auto', image_urls: ['https://a/b.png'], output_format: 'png', resolution: null }), ['image_urls'],
    'auto is the default of an edit')
  t.same(carriedFields('nano-banana', { kind: 'image', aspect_ratio: 'auto', image_urls: [], output_format: 'jpeg', resolution: null }).sort(), ['aspect_ratio', 'output_format'])
})

t.test('fieldsRead: the roots of a mapping\'s paths; no mapping reads everything', async (t) => {
  t.same([...fieldsRead({ a: '$.prompt', b: { from: '$.duration', as: 'integer' }, c: { voice_id: '$.voice_id' }, d: '$.image_urls[0]', e: 'literal' })!].sort(),
    ['duration', 'image_urls', 'prompt', 'voice_id'])
  t.equal(fieldsRead(undefined), null)
})

t.test('unserved: a dropped option, a value outside the enum, a required field left empty; serves lists values met without a field', async (t) => {
  const t2v: RouteSpec = { provider: 'fal', model: 'fal-ai/kling-video/v3/pro/text-to-video', input: { prompt: '$.prompt', aspect_ratio: '$.aspect_ratio', duration: '$.duration' } }
  const i2v: RouteSpec = { provider: 'fal', model: 'fal-ai/kling-video/v3/pro/image-to-video', input: { prompt: '$.prompt', start_image_url: '$.image_url', duration: '$.duration' } }
  const s1 = loadUpstreamSchema('fal', t2v.model)
  const s2 = loadUpstreamSchema('fal', i2v.model)
  t.same(unserved(t2v, s1, 'kling-3.0', video(), 'p'), [])
  t.same(unserved(t2v, s1, 'kling-3.0', video({ mode: 'pro' }), 'p').map(u => u.field), ['mode'], 'mode is not read: dropped')
  t.same(unserved({ ...t2v, serves: { mode: ['pro'] } }, s1, 'kling-3.0', video({ mode: 'pro' }), 'p'), [], 'serves: the pro endpoint is the pro tier')
  t.same(unserved(t2v, s1, 'kling-3.0', video({ aspect_ratio: '2:3' }), 'p').map(u => u.field), ['aspect_ratio'], 'outside the enum')
  t.same(unserved(t2v, s1, 'kling-3.0', video({ image_url: 'https://a/b.png' }), 'p').map(u => u.field), ['image_url'], 'a frame the route would drop')
  t.same(unserved(i2v, s2, 'kling-3.0', video(), 'p').map(u => u.field), ['image_url'], 'start_image_url is required: blamed on our image_url')
  t.same(unserved(i2v, s2, 'kling-3.0', video({ image_url: 'https://a/b.png' }), 'p'), [])
  t.same(unserved({ provider: 'simulated', model: 'simulated' }, null, 'kling-3.0', video({ aspect_ratio: '2:3', mode: 'pro' }), 'p'), [], 'simulated serves everything')
  const edit: RouteSpec = { provider: 'fal', model: 'fal-ai/nano-banana/edit', input: { prompt: '$.prompt', image_urls: '$.image_urls' } }
  const img = { kind: 'image', prompt: 'p', aspect_ratio: '1:1', output_format: 'png', resolution: null, image_urls: [] }
  t.same(unserved(edit, loadUpstreamSchema('fal', edit.model), 'nano-banana', img, 'p').map(u => u.field), ['image_urls'], 'an empty list does not fill a required list')
})
