import { useEffect, useMemo, useState } from 'preact/hooks'
import { priceAudio, priceImage, priceVideo } from '../../../src/catalog/pricing.js'
import { call, errorText, upload } from '../api.js'
import { Card, ErrorLine } from '../ui.js'

/** A model as GET /v1/models lists it (only the fields the form reads). */
interface Model {
  id: string; name: string; status: string; estimated_seconds: number
  aspect_ratios?: string[]; durations?: string[]; resolutions?: string[]; modes?: string[]
  defaults?: Record<string, string>; note?: string
  capabilities?: {
    requires?: string[]; first_frame?: boolean; last_frame?: boolean; reference_images_max?: number; reference_videos_max?: number
    reference_audio_max?: number; edit?: boolean; image_urls_max?: number; character_assets_max?: number; voice_assets_max?: number
  }
}
interface Asset { id: number; kind: 'character' | 'voice'; name: string }

/** A request field that takes media: filled by uploading files (POST /v1/uploads). */
interface MediaField { field: string; label: string; kind: 'image' | 'audio' | 'video'; max: number }
const ACCEPT = { image: '.jpg,.jpeg,.png,.webp,.avif,image/*', audio: '.mp3,.wav,.aac,.m4a,.mp4,.ogg,audio/*', video: '.mp4,.mov,.avi,.webm,.mpg,.mpeg,video/*' }

/** The media inputs a model takes, from its GET /v1/models capabilities. */
function mediaFields (kind: Kind, m: Model | undefined): MediaField[] {
  const c = m?.capabilities ?? {}
  const out: MediaField[] = []
  if (kind === 'video') {
    if (c.first_frame || c.requires?.includes('image_url')) out.push({ field: 'image_url', label: m?.id === 'lipsync' ? 'Face image' : 'Start image (image-to-video)', kind: 'image', max: 1 })
    if (c.last_frame) out.push({ field: 'last_frame_url', label: 'End image', kind: 'image', max: 1 })
    if (c.reference_images_max) out.push({ field: 'reference_image_urls', label: 'Reference images', kind: 'image', max: c.reference_images_max })
    if (c.reference_videos_max) out.push({ field: 'reference_video_urls', label: 'Reference videos', kind: 'video', max: c.reference_videos_max })
    if (c.reference_audio_max) out.push({ field: 'reference_audio_urls', label: 'Reference audio', kind: 'audio', max: c.reference_audio_max })
    if (c.requires?.includes('audio_url')) out.push({ field: 'audio_url', label: 'Speech audio', kind: 'audio', max: 1 })
  } else if (kind === 'image' && c.edit) {
    out.push({ field: 'image_urls', label: 'Images to edit (optional)', kind: 'image', max: c.image_urls_max ?? 5 })
  }
  return out
}

/** Seconds of an audio file, read by the browser (lip sync prices and validates audio_duration). */
function audioSeconds (file: File): Promise<number | null> {
  return new Promise(resolve => {
    const a = new Audio()
    const url = URL.createObjectURL(file)
    a.preload = 'metadata'
    a.onloadedmetadata = () => { URL.revokeObjectURL(url); resolve(Number.isFinite(a.duration) ? Math.round(a.duration * 100) / 100 : null) }
    a.onerror = () => { URL.revokeObjectURL(url); resolve(null) }
    a.src = url
  })
}

function MediaInput ({ f, urls, onChange, onDuration, setBusy }: {
  f: MediaField; urls: string[]; onChange: (urls: string[]) => void; onDuration: (s: number | null) => void; setBusy: (b: boolean) => void
}) {
  const [error, setError] = useState<string | null>(null)
  const [uploading, setUploading] = useState(false)
  const id = `media-${f.field}`
  const pick = async (e: Event) => {
    const input = e.target as HTMLInputElement
    const files = [...(input.files ?? [])].slice(0, f.max - urls.length)
    if (files.length === 0) return
    setError(null); setUploading(true); setBusy(true)
    try {
      const added: string[] = []
      for (const file of files) {
        added.push((await upload(file, f.kind)).url)
        if (f.field === 'audio_url') onDuration(await audioSeconds(file))
      }
      onChange(f.max === 1 ? added.slice(-1) : [...urls, ...added])
    } catch (err) { setError(errorText(err)) } finally { setUploading(false); setBusy(false); input.value = '' }
  }
  return (
    <div class="media-input" data-field={f.field}>
      <label for={id}>{f.label}{f.max > 1 ? ` (up to ${f.max})` : ''}</label>
      <div class="row wrap">
        <input id={id} name={f.field} type="file" accept={ACCEPT[f.kind]} multiple={f.max > 1} disabled={uploading || urls.length >= f.max} onChange={pick} />
        {uploading && <span class="muted small" role="status">Uploading…</span>}
        {urls.map(u => (
          <span class="chip" data-testid="uploaded">
            {f.kind === 'image' ? <img class="thumb" src={u} alt={`${f.label} uploaded`} /> : <span class="mono small">{u.split('/').pop()}</span>}
            <button type="button" class="secondary small" aria-label={`Remove ${u.split('/').pop()}`} onClick={() => onChange(urls.filter(x => x !== u))}>×</button>
          </span>
        ))}
      </div>
      <ErrorLine error={error} />
    </div>
  )
}
interface Catalogue { video: Model[]; image: Model[]; audio: Model[] }

type Kind = 'video' | 'image' | 'audio'

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
  // Media inputs (uploaded URLs per field), lip sync's audio length, gemini-omni's assets.
  const [media, setMedia] = useState<Record<string, string[]>>({})
  const [audioDuration, setAudioDuration] = useState<number | null>(null)
  const [uploading, setUploading] = useState(false)
  const [assets, setAssets] = useState<Asset[] | null>(null)
  const [chosen, setChosen] = useState<Record<number, boolean>>({})

  useEffect(() => { call<Catalogue>('GET', '/v1/models', undefined, { anonymous: true }).then(setCatalogue, e => setError(errorText(e))) }, [])
  const models = useMemo(() => (catalogue?.[kind] ?? []).filter(m => m.status === 'available'), [catalogue, kind])
  // Derived on every render, never written back from an effect: an effect scheduled by the
  // render before a quick model choice (the kind just changed) ran after it and put the kind's
  // first model back over the user's choice.
  const model = models.find(m => m.id === modelId) ?? models[0]

  const media_ = mediaFields(kind, model)
  const takesAssets = !!(model?.capabilities?.voice_assets_max || model?.capabilities?.character_assets_max)
  useEffect(() => {
    if (takesAssets && assets === null) call<{ data: Asset[] }>('GET', '/v1/assets?limit=100').then(r => setAssets(r.data), e => setError(errorText(e)))
  }, [takesAssets])
  const value = (field: string, list?: string[]) => opts[field] ?? model?.defaults?.[field] ?? list?.[0] ?? ''
  const fields: Array<{ field: string; label: string; list: string[] }> = []
  if (model?.aspect_ratios) fields.push({ field: 'aspect_ratio', label: 'Aspect ratio', list: model.aspect_ratios })
  if (model?.durations) fields.push({ field: 'duration', label: 'Duration (s)', list: model.durations })
  if (model?.resolutions) fields.push({ field: 'resolution', label: 'Resolution', list: model.resolutions })
  if (model?.modes) fields.push({ field: 'mode', label: 'Mode', list: model.modes })

  const body: Record<string, unknown> = { model: model?.id }
  if (kind !== 'audio') { if (prompt || model?.id !== 'lipsync') body.prompt = prompt }
  else if (model?.id === 'voiceover') { body.text = prompt; body.voice_id = voiceId }
  else { body.style = prompt; body.instrumental = instrumental; if (!instrumental) body.lyrics = lyrics }
  for (const f of fields) body[f.field] = value(f.field, f.list)
  for (const f of media_) {
    const urls = media[f.field] ?? []
    if (urls.length > 0) body[f.field] = f.max === 1 && !f.field.endsWith('_urls') ? urls[0] : urls
  }
  if (model?.id === 'lipsync' && audioDuration !== null) body.audio_duration = audioDuration
  if (takesAssets && assets) {
    for (const k of ['voice', 'character'] as const) {
      const ids = assets.filter(a => a.kind === k && chosen[a.id]).map(a => a.id)
      if (ids.length > 0) body[`${k}_asset_ids`] = ids
    }
  }
  let price: number | null = null
  let priceError: string | null = null
  if (model) {
    try {
      price = kind === 'video'
        ? priceVideo({
          model: model.id, duration: body.duration as string | undefined, resolution: body.resolution as string | undefined,
          mode: body.mode as string | undefined, reference_video_urls: body.reference_video_urls as string[] | undefined,
          audio_duration: body.audio_duration as number | undefined,
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
      setPrompt(''); setMedia({}); setAudioDuration(null)
      onCreated(job)
    } catch (err) { setError(errorText(err)) } finally { setBusy(false) }
  }

  return (
    <Card title="Create a job">
      <form class="stack" onSubmit={submit} data-testid="create-job">
        <div class="row wrap">
          <label>Type
            <select name="kind" value={kind} onChange={(e) => { setKind((e.target as HTMLSelectElement).value as Kind); setModelId(''); setOpts({}); setMedia({}) }}>
              <option value="video">video</option>
              <option value="image">image</option>
              <option value="audio">audio</option>
            </select>
          </label>
          <label>Model
            <select name="model" value={model?.id ?? ''} onChange={(e) => { setModelId((e.target as HTMLSelectElement).value); setOpts({}); setMedia({}) }}>
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
        {media_.length > 0 && (
          <fieldset class="media-fields">
            <legend>Media inputs</legend>
            {media_.map(f => (
              <MediaInput f={f} urls={media[f.field] ?? []} setBusy={setUploading}
                onChange={(urls) => setMedia(m => ({ ...m, [f.field]: urls }))} onDuration={setAudioDuration} />
            ))}
            {model?.id === 'lipsync' && <p class="muted small">Audio length: {audioDuration ?? '-'} s</p>}
          </fieldset>
        )}
        {takesAssets && (
          <fieldset class="media-fields">
            <legend>Assets (a voice, and a character or reference images)</legend>
            {assets && assets.length === 0 && <p class="muted small">No assets on this account yet.</p>}
            <div class="row wrap">
              {assets?.map(a => <label class="check"><input type="checkbox" name={`${a.kind}_asset`} checked={!!chosen[a.id]} onChange={(e) => setChosen({ ...chosen, [a.id]: (e.target as HTMLInputElement).checked })} /> {a.kind}: {a.name}</label>)}
            </div>
          </fieldset>
        )}
        {model?.id === 'voiceover' && <label>Voice id <input name="voice_id" required maxLength={64} value={voiceId} onInput={(e) => setVoiceId((e.target as HTMLInputElement).value)} /></label>}
        {model?.id === 'music' && (
          <div class="row wrap">
            <label class="check"><input type="checkbox" name="instrumental" checked={instrumental} onChange={(e) => setInstrumental((e.target as HTMLInputElement).checked)} /> instrumental</label>
            {!instrumental && <label class="grow">Lyrics <textarea name="lyrics" rows={3} required maxLength={3000} value={lyrics} onInput={(e) => setLyrics((e.target as HTMLTextAreaElement).value)} /></label>}
          </div>
        )}
        <label>{model?.id === 'voiceover' ? 'Text' : model?.id === 'music' ? 'Style' : 'Prompt'} <textarea name="prompt" rows={3} required={model?.id !== 'lipsync'} maxLength={model?.id === 'voiceover' ? 5000 : model?.id === 'music' ? 1000 : 10000} value={prompt} onInput={(e) => setPrompt((e.target as HTMLTextAreaElement).value)} /></label>
        <div class="row">
          <button type="submit" disabled={busy || uploading || price === null}>Create {kind}</button>
          <span data-testid="price">{price !== null ? <><strong>{price}</strong> credits</> : priceError ?? '…'}</span>
          {model && <span class="muted">about {model.estimated_seconds} s</span>}
        </div>
        <ErrorLine error={error} />
      </form>
    </Card>
  )
}
