import { useEffect, useRef, useState } from 'preact/hooks'
import { call, errorText, fmtDate } from '../api.js'
import { Card, ErrorLine, Pager } from '../ui.js'
import { CreateJob } from './create-job.js'

interface Job {
  id: string; status: string; type: string; model: string; prompt: string | null; progress: number
  credits_charged: number; credits_refunded: number; result_url: string | null; error_message: string | null; created_at: string
}
interface List<T> { data: T[]; total: number; limit: number; offset: number }
const TERMINAL = new Set(['completed', 'failed', 'cancelled'])

/**
 * Live updates over SSE tickets: POST /v1/sse/tickets, then EventSource on
 * /v1/sse/jobs/{id}?ticket= (EventSource cannot send the session header). One stream per
 * running job; each closes at its `done` event.
 */
function useLive (jobs: Job[], update: (id: string, patch: Partial<Job>) => void): void {
  const streams = useRef(new Map<string, EventSource>())
  useEffect(() => {
    for (const j of jobs) {
      if (TERMINAL.has(j.status) || streams.current.has(j.id)) continue
      const placeholder = new EventTarget() as unknown as EventSource
      streams.current.set(j.id, placeholder)
      call<{ ticket: string }>('POST', '/v1/sse/tickets', { jobId: j.id }).then(({ ticket }) => {
        if (streams.current.get(j.id) !== placeholder) return
        const es = new EventSource(`/v1/sse/jobs/${encodeURIComponent(j.id)}?ticket=${encodeURIComponent(ticket)}`)
        streams.current.set(j.id, es)
        es.addEventListener('status', (ev) => {
          const d = JSON.parse((ev as MessageEvent).data)
          update(j.id, { status: d.status, progress: d.progress, result_url: d.result_url ?? null, error_message: d.error_message ?? null })
        })
        es.addEventListener('done', (ev) => {
          const d = JSON.parse((ev as MessageEvent).data)
          update(j.id, { status: d.status })
          es.close()
          // The final view (refund, result) from the API.
          call<Job>('GET', `/v1/jobs/${encodeURIComponent(j.id)}`).then(full => update(j.id, full), () => {})
        })
        es.onerror = () => { if (es.readyState === EventSource.CLOSED) streams.current.delete(j.id) }
      }, () => { streams.current.delete(j.id) })
    }
  }, [jobs.map(j => `${j.id}:${TERMINAL.has(j.status)}`).join(',')])
  useEffect(() => () => { for (const es of streams.current.values()) es.close?.(); streams.current.clear() }, [])
}

function Preview ({ job, poster }: { job: Job; poster: string | undefined }) {
  if (job.status !== 'completed' || !job.result_url) return null
  if (job.type === 'image') return <img class="preview" src={job.result_url} alt={job.prompt ?? job.id} loading="lazy" />
  if (job.type === 'audio') return <audio class="preview" controls preload="metadata" src={job.result_url} />
  return <video class="preview" controls preload="metadata" poster={poster} src={job.result_url} data-testid={`video-${job.id}`} />
}

/** The caller's jobs, live, with previews and cancel; plus the create form. */
export function JobsPage () {
  const [list, setList] = useState<List<Job> | null>(null)
  const [offset, setOffset] = useState(0)
  const [posters, setPosters] = useState<Map<string, string>>(new Map())
  const [error, setError] = useState<string | null>(null)
  // Filters of GET /v1/jobs (status, type, model) and the prompt search `q`.
  const [filters, setFilters] = useState<Record<string, string>>({})
  const [search, setSearch] = useState('')

  const load = () => {
    const p = new URLSearchParams({ limit: '20', offset: String(offset) })
    for (const [k, v] of Object.entries(filters)) if (v) p.set(k, v)
    return call<List<Job>>('GET', `/v1/jobs?${p}`).then(setList, e => setError(errorText(e)))
  }
  const loadPosters = () => call<{ data: Array<{ video_url: string; thumbnail_url: string | null }> }>('GET', '/v1/videos?limit=100')
    .then(r => setPosters(new Map(r.data.filter(v => v.thumbnail_url).map(v => [v.video_url, v.thumbnail_url!]))), () => {})
  useEffect(() => { load(); loadPosters() }, [offset, filters])
  const filter = (k: string, v: string) => { setOffset(0); setFilters(f => ({ ...f, [k]: v })) }

  const update = (id: string, patch: Partial<Job>) => {
    setList(l => l && { ...l, data: l.data.map(j => j.id === id ? { ...j, ...patch } : j) })
    if (patch.status === 'completed' && patch.result_url) loadPosters()
  }
  useLive(list?.data ?? [], update)

  const cancel = async (id: string) => {
    setError(null)
    try { update(id, await call<Job>('DELETE', `/v1/jobs/${encodeURIComponent(id)}`)) } catch (e) { setError(errorText(e)) }
  }

  return (
    <div class="stack">
      <CreateJob onCreated={async (j) => {
        if (offset !== 0 || Object.values(filters).some(Boolean)) { setOffset(0); setFilters({}); setSearch(''); return }
        try {
          const full = await call<Job>('GET', `/v1/jobs/${encodeURIComponent(j.id)}`)
          setList(l => l && (l.data.some(x => x.id === full.id) ? l : { ...l, data: [full, ...l.data].slice(0, l.limit), total: l.total + 1 }))
        } catch (e) { setError(errorText(e)) }
      }} />
      <Card title="Jobs" actions={<button type="button" class="secondary" onClick={load}>Refresh</button>}>
        <form class="row wrap filters" role="search" aria-label="Filter jobs" onSubmit={(e) => { e.preventDefault(); filter('q', search.trim()) }}>
          <label>Status
            <select name="filter_status" value={filters.status ?? ''} onChange={(e) => filter('status', (e.target as HTMLSelectElement).value)}>
              <option value="">any</option>
              {['queued', 'submitted', 'processing', 'completed', 'failed', 'cancelled'].map(v => <option value={v}>{v}</option>)}
            </select>
          </label>
          <label>Type
            <select name="filter_type" value={filters.type ?? ''} onChange={(e) => filter('type', (e.target as HTMLSelectElement).value)}>
              <option value="">any</option>
              {['video', 'image', 'audio', 'extend'].map(v => <option value={v}>{v}</option>)}
            </select>
          </label>
          <label>Model <input name="filter_model" size={14} placeholder="any" value={filters.model ?? ''} onChange={(e) => filter('model', (e.target as HTMLInputElement).value.trim())} /></label>
          <label class="grow">Search prompts or a job id <input name="q" type="search" value={search} onInput={(e) => setSearch((e.target as HTMLInputElement).value)} /></label>
          <button type="submit" class="secondary">Search</button>
          {Object.values(filters).some(Boolean) && <button type="button" class="secondary" onClick={() => { setSearch(''); setOffset(0); setFilters({}) }}>Clear</button>}
        </form>
        <ErrorLine error={error} />
        <table data-testid="jobs">
          <thead><tr><th>Job</th><th>Model</th><th>Status</th><th class="num">Credits</th><th>Result</th><th /></tr></thead>
          <tbody>
            {list?.data.map(j => (
              <tr data-job={j.id} data-status={j.status}>
                <td><a class="mono" href={`#/jobs/${j.id}`}>{j.id}</a><div class="muted small">{fmtDate(j.created_at)}</div><div class="small clip">{j.prompt}</div></td>
                <td>{j.type}<br /><span class="muted">{j.model}</span></td>
                <td><span class={`pill ${j.status}`} data-testid="status">{j.status}</span>{!TERMINAL.has(j.status) && <div class="progress"><span style={{ width: `${j.progress}%` }} /></div>}{j.error_message && <div class="error small">{j.error_message}</div>}</td>
                <td class="num">{j.credits_charged}{j.credits_refunded > 0 && <div class="pos small">+{j.credits_refunded} refunded</div>}</td>
                <td><Preview job={j} poster={j.result_url ? posters.get(j.result_url) : undefined} /></td>
                <td>{j.status === 'queued' && <button type="button" class="danger" aria-label={`Cancel ${j.id}`} onClick={() => cancel(j.id)}>Cancel</button>}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {list && list.total === 0 && <p class="muted">{Object.values(filters).some(Boolean) ? 'No job matches these filters.' : 'No jobs yet.'}</p>}
        {list && <Pager total={list.total} limit={list.limit} offset={list.offset} onPage={setOffset} />}
      </Card>
    </div>
  )
}
