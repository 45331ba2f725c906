import { useEffect, useMemo, useState } from 'preact/hooks'
import { priceAudio, priceImage, priceVideo } from '../../../src/catalog/pricing.js'
import { call, errorText } from '../api.js'
import { Card, ErrorLine } from '../ui.js'

/** A model as GET /v1/models lists it (only the fields the form reads). */
interface Model {
  id: string; name: string; status: string; estimated_seconds: number
  aspect_ratios?: string[]; durations?: string[]; resolutions?: string[]; modes?: string[]
  defaults?: Record<string, string>; note?: string
  capabilities?: { requires?: string[] }
}
interface Catalogue { video: Model[]; image: Model[]; audio: Model[] }

type Kind = 'video' | 'image' | 'audio'
/** Models whose requests need inputs this form does not collect (media URLs, assets). */
const NEEDS_INPUTS = new Set(['lipsync'])

/**
 * "Create a job", driven by GET /v1/models: each select lists only what the chosen model
 * supports, and the price comes from src/catalog/pricing.ts, the same functions the API
 * charges with (bundled into the page), before anything is submitted.
 */
export function CreateJob ({ onCreated }: { onCreated: (job: { id: string }) => void }) {
  const [catalogue, setCatalogue] = useState<Catalogue | null>(null)
  const [kind, setKind] = useState<Kind>('video')
  const [modelId, setModelId] = useState('')
  const [opts, setOpts] = useState<Record<string, string>>({})
  const [prompt, setPrompt] = useState('')
  const [error, setError] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  // Audio: voiceover speaks `prompt` with voice_id; music takes `prompt` as its style.
  const [voiceId, setVoiceId] = useState('')
  const [instrumental, setInstrumental] = useState(true)
  const [lyrics, setLyrics] = useState('')

  useEffect(() => { call<Catalogue>('GET', '/v1/models', undefined, { anonymous: true }).then(setCatalogue, e => setError(errorText(e))) }, [])
  const models = useMemo(() => (catalogue?.[kind] ?? []).filter(m => m.status === 'available' && !NEEDS_INPUTS.has(m.id)), [catalogue, kind])
  // Derived on every render, never written back from an effect: an effect scheduled by the
  // render before a quick model choice (the kind just changed) ran after it and put the kind's
  // first model back over the user's choice.
  const model = models.find(m => m.id === modelId) ?? models[0]

  const value = (field: string, list?: string[]) => opts[field] ?? model?.defaults?.[field] ?? list?.[0] ?? ''
  const fields: Array<{ field: string; label: string; list: string[] }> = []
  if (model?.aspect_ratios) fields.push({ field: 'aspect_ratio', label: 'Aspect ratio', list: model.aspect_ratios })
  if (model?.durations) fields.push({ field: 'duration', label: 'Duration (s)', list: model.durations })
  if (model?.resolutions) fields.push({ field: 'resolution', label: 'Resolution', list: model.resolutions })
  if (model?.modes) fields.push({ field: 'mode', label: 'Mode', list: model.modes })

  const body: Record<string, unknown> = { model: model?.id }
  if (kind !== 'audio') body.prompt = prompt
  else if (model?.id === 'voiceover') { body.text = prompt; body.voice_id = voiceId }
  else { body.style = prompt; body.instrumental = instrumental; if (!instrumental) body.lyrics = lyrics }
  for (const f of fields) body[f.field] = value(f.field, f.list)
  let price: number | null = null
  let priceError: string | null = null
  if (model) {
    try {
      price = kind === 'video'
        ? priceVideo({
          model: model.id, duration: body.duration as string | undefined, resolution: body.resolution as string | undefined,
          mode: body.mode as string | undefined
        })
        : kind === 'image'
          ? priceImage({ model: model.id, resolution: body.resolution as string | undefined })
          : priceAudio({ model: model.id, text: prompt || null })
    } catch (e) { priceError = (e as Error).message }
  }

  const submit = async (e: Event) => {
    e.preventDefault()
    setError(null); setBusy(true)
    try {
      const job = await call<{ id: string }>('POST', `/v1/generate/${kind}`, body)
      setPrompt('')
      onCreated(job)
    } catch (err) { setError(errorText(err)) } finally { setBusy(false) }
  }

  return (
    <Card title="Create a job">
      <form class="stack" onSubmit={submit} data-testid="create-job">
        <div class="row wrap">
          <label>Type
            <select name="kind" value={kind} onChange={(e) => { setKind((e.target as HTMLSelectElement).value as Kind); setModelId(''); setOpts({}) }}>
              <option value="video">video</option>
              <option value="image">image</option>
              <option value="audio">audio</option>
            </select>
          </label>
          <label>Model
            <select name="model" value={model?.id ?? ''} onChange={(e) => { setModelId((e.target as HTMLSelectElement).value); setOpts({}) }}>
              {models.map(m => <option value={m.id}>{m.name} ({m.id})</option>)}
            </select>
          </label>
          {fields.map(f => (
            <label>{f.label}
              <select name={f.field} value={value(f.field, f.list)} onChange={(e) => setOpts({ ...opts, [f.field]: (e.target as HTMLSelectElement).value })}>
                {f.list.map(v => <option value={v}>{v}</option>)}
              </select>
            </label>
          ))}
        </div>
        {model?.note && <p class="muted">{model.note}</p>}
        {model?.id === 'voiceover' && <label>Voice id <input name="voice_id" required maxLength={64} value={voiceId} onInput={(e) => setVoiceId((e.target as HTMLInputElement).value)} /></label>}
        {model?.id === 'music' && (
          <div class="row wrap">
            <label class="check"><input type="checkbox" name="instrumental" checked={instrumental} onChange={(e) => setInstrumental((e.target as HTMLInputElement).checked)} /> instrumental</label>
            {!instrumental && <label class="grow">Lyrics <textarea name="lyrics" rows={3} required maxLength={3000} value={lyrics} onInput={(e) => setLyrics((e.target as HTMLTextAreaElement).value)} /></label>}
          </div>
        )}
        <label>{model?.id === 'voiceover' ? 'Text' : model?.id === 'music' ? 'Style' : 'Prompt'} <textarea name="prompt" rows={3} required maxLength={model?.id === 'voiceover' ? 5000 : model?.id === 'music' ? 1000 : 10000} value={prompt} onInput={(e) => setPrompt((e.target as HTMLTextAreaElement).value)} /></label>
        <div class="row">
          <button type="submit" disabled={busy || price === null}>Create {kind}</button>
          <span data-testid="price">{price !== null ? <><strong>{price}</strong> credits</> : priceError ?? '…'}</span>
          {model && <span class="muted">about {model.estimated_seconds} s</span>}
        </div>
        <ErrorLine error={error} />
      </form>
    </Card>
  )
}
