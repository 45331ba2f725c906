// The shipped config/providers.example.json, unchanged, against the strict contract stubs
// (docs/providers.md "Capabilities"): every catalogue model completes with its defaults, and
// every option value the catalogue allows either completes or is answered 422
// UNSUPPORTED_OPTION up front with nothing charged; never a 502 from a refused input, never a job
// failed by an upstream 422, and no stub ever refuses an input.
import t from 'tap'
import { IMAGE_MODELS, LIP_SYNC_MODES, VIDEO_MODELS } from '../../src/catalog/models.js'
import { startFalStub } from '../fixtures/fal-stub.js'
import { startKieStub } from '../fixtures/kie-stub.js'
import { startReplicateStub } from '../fixtures/replicate-stub.js'
import type { ProviderStub, StubMedia } from '../fixtures/provider-stub.js'
import { UNLIMITED_TIERS, balance, dbOf, paidUser, pollJob } from '../helpers/jobs.js'
import { startServer } from '../helpers/server.js'
import { freePort } from '../helpers/net.js'

const fal = await startFalStub()
const rep = await startReplicateStub()
const kie = await startKieStub()
const stubs: ProviderStub[] = [fal, rep, kie]
t.teardown(async () => { await Promise.all(stubs.map(x => x.close())) })
// Jobs end at once and call back (the service completes on the verified callback, not a poll).
for (const x of stubs) x.defaults = { ...x.defaults, steps: [], finishAfterMs: 10 }

const port = await freePort()
const s = await startServer(t, {
  PORT: String(port),
  PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
  SHARDS: '1',
  TIER_LIMITS: UNLIMITED_TIERS,
  PROVIDERS_FILE: 'config/providers.example.json',
  FAL_KEY: fal.key,
  FAL_QUEUE_URL: fal.url,
  FAL_JWKS_URL: fal.jwksUrl,
  REPLICATE_API_TOKEN: rep.token,
  REPLICATE_API_URL: rep.url,
  REPLICATE_WEBHOOK_SECRET: rep.secret,
  KIE_API_KEY: kie.key,
  KIE_API_URL: kie.url,
  KIE_WEBHOOK_HMAC_KEY: kie.hmacKey,
  WEBHOOK_ALLOWLIST: stubs.map(x => new URL(x.url).host).join(','),
})
const sql = dbOf(t, s)
const u = await paidUser(s, 10_000_000)
const voice = await s.req('POST', `/v1/admin/accounts/${u.id}/assets`, { admin: true, body: { kind: 'voice', name: 'Narrator' } })
if (voice.status !== 201) throw new Error(`voice asset: ${voice.status} ${voice.text}`)

const IMG = 'https://images.example.com/face.png'
/** The smallest valid request of each model: a prompt plus what the model cannot do without. */
function base (model: string): Record<string, unknown> {
  switch (model) {
    case 'lipsync': return { model, image_url: IMG, audio_url: 'https://audio.example.com/voice.mp3', audio_duration: 5 }
    case 'gemini-omni': return { model, prompt: 'a presenter speaks', voice_asset_ids: [voice.body.id], reference_image_urls: [IMG] }
    case 'voiceover': return { model, text: 'Hello from the harbour.', voice_id: 'narrator' }
    case 'music': return { model, lyrics: 'la la la, the tide comes in', style: 'folk' }
    default: return { model, prompt: 'a quiet harbour at dawn' }
  }
}

let charged = 0
const matrix: string[] = []

/** One creation: 201 then completed, or 422 UNSUPPORTED_OPTION; anything else fails the test. */
async function run (t: any, kind: 'video' | 'image' | 'audio', body: Record<string, unknown>, label: string): Promise<'ran' | 'refused'> {
  const r = await s.req('POST', `/v1/generate/${kind}`, { key: u.key, body })
  if (r.status === 422 && r.body.code === 'UNSUPPORTED_OPTION') {
    matrix.push(`${label}: 422 ${r.body.param}`)
    t.ok(r.body.param, `${label}: 422 names the option`)
    return 'refused'
  }
  t.equal(r.status, 201, `${label}: ${r.text}`)
  if (r.status !== 201) return 'refused'
  charged += r.body.credits_charged
  const { job } = await pollJob(s, u, r.body.id, { timeoutMs: 15_000, everyMs: 25 })
  t.equal(job.status, 'completed', `${label}: ${job.error_message ?? ''}`)
  charged -= job.credits_refunded ?? 0
  return 'ran'
}

function media (kind: 'video' | 'image' | 'audio'): StubMedia { return kind === 'video' ? 'mp4' : kind === 'image' ? 'png' : 'mp3' }

const before = await balance(s, u)

t.test('every catalogue model completes with its defaults on the shipped routes', async (t) => {
  const all: Array<['video' | 'image' | 'audio', string]> = [
    ...VIDEO_MODELS.map(m => ['video', m.id] as ['video', string]),
    ...IMAGE_MODELS.map(m => ['image', m.id] as ['image', string]),
    ['audio', 'voiceover'], ['audio', 'music'],
  ]
  for (const kind of ['video', 'image', 'audio'] as const) {
    for (const x of stubs) x.defaults = { ...x.defaults, media: media(kind) }
    const outcomes = await Promise.all(all.filter(([k]) => k === kind).map(([, id]) => run(t, kind, base(id), `${id} defaults`)))
    t.ok(outcomes.every(o => o === 'ran'), `every ${kind} model ran with its defaults`)
  }
})

t.test('every option value the catalogue allows completes or is refused up front (422 UNSUPPORTED_OPTION)', async (t) => {
  for (const x of stubs) x.defaults = { ...x.defaults, media: 'mp4' }
  for (const m of VIDEO_MODELS) {
    const variants: Array<[string, unknown]> = [
      ...m.aspectRatios.map(v => ['aspect_ratio', v] as [string, unknown]),
      ...m.durations.map(v => ['duration', v] as [string, unknown]),
      ...m.resolutions.map(v => ['resolution', v] as [string, unknown]),
      ...m.modes.map(v => ['mode', v] as [string, unknown]),
      ...(m.lipsync ? LIP_SYNC_MODES.map(v => ['lip_sync_mode', v] as [string, unknown]) : []),
    ]
    await Promise.all(variants.map(([f, v]) => run(t, 'video', { ...base(m.id), [f]: v }, `${m.id} ${f}=${String(v)}`)))
  }
  for (const x of stubs) x.defaults = { ...x.defaults, media: 'png' }
  for (const m of IMAGE_MODELS) {
    const variants: Array<[string, unknown]> = [
      ...m.aspectRatios.map(v => ['aspect_ratio', v] as [string, unknown]),
      ...m.resolutions.map(v => ['resolution', v] as [string, unknown]),
      ...m.outputFormats.map(v => ['output_format', v] as [string, unknown]),
    ]
    await Promise.all(variants.map(([f, v]) => run(t, 'image', { ...base(m.id), [f]: v }, `${m.id} ${f}=${String(v)}`)))
  }
  t.comment(`refused up front:\n${matrix.join('\n')}`)
})

t.test('nothing was charged for a refusal, no stub refused an input, no job failed', async (t) => {
  t.equal(await balance(s, u), before - charged, 'the balance moved by exactly the completed jobs')
  t.same(stubs.flatMap(x => x.refusals.map(r => `${r.model}: ${r.issues.map(i => `${i.path.join('.')} ${i.message}`).join('; ')}`)), [], 'no upstream refused an input')
  const failed = await sql<{ n: string }[]>`SELECT count(*)::text AS n FROM jobs WHERE status <> 'completed'`
  t.equal(failed[0].n, '0', 'every job that was created completed')
})
