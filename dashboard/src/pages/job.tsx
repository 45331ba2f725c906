import { useEffect, useState } from 'preact/hooks'
import { call, copyText, errorText, fmtDate, watchJob } from '../api.js'
import { Card, ErrorLine } from '../ui.js'

interface Job {
  id: string; status: string; type: string; model: string; prompt: string | null; progress: number
  credits_charged: number; credits_refunded: number; result_url: string | null; error_message: string | null
  content_policy_violation: boolean; created_at: string; updated_at: string; completed_at: string | null; estimated_seconds?: number
}
interface Details {
  job: Job
  request: { method: 'POST'; path: string; body: Record<string, unknown> }
  timeline: Array<{ at: string; kind: string; message: string; credits: number | null }>
}
const TERMINAL = new Set(['completed', 'failed', 'cancelled'])

/** Single quotes for a POSIX shell: `'` becomes `'\''`. */
const shq = (s: string) => `'${s.replace(/'/g, "'\\''")}'`

/**
 * "Copy as" snippets (README "Dashboard"): the job's real creation request (GET
 * /v1/jobs/{id}/details `request`), with the key read from GENJOBS_API_KEY, never embedded.
 */
export function snippets (base: string, req: Details['request']): Record<'curl' | 'JavaScript' | 'Python', string> {
  const url = base + req.path
  const json = JSON.stringify(req.body, null, 2)
  return {
    curl: [
      `curl -sS -X ${req.method} ${shq(url)} \\`,
      '  -H "Authorization: Bearer $GENJOBS_API_KEY" \\',
      "  -H 'Content-Type: application/json' \\",
      `  -d ${shq(json)}`,
    ].join('\n'),
    JavaScript: [
      `const res = await fetch(${JSON.stringify(url)}, {`,
      `  method: ${JSON.stringify(req.method)},`,
      '  headers: { Authorization: `Bearer ${process.env.GENJOBS_API_KEY}`, \'Content-Type\': \'application/json\' },',
      `  body: JSON.stringify(${json.replace(/\n/g, '\n  ')}),`,
      '})',
      'console.log(res.status, await res.json())',
    ].join('\n'),
    // A JSON string literal is a valid Python string literal: the body goes through json.loads.
    Python: [
      'import json, os, urllib.request',
      '',
      `body = json.loads(${JSON.stringify(JSON.stringify(req.body))})`,
      'req = urllib.request.Request(',
      `    ${JSON.stringify(url)},`,
      `    data=json.dumps(body).encode(), method=${JSON.stringify(req.method)},`,
      '    headers={"Authorization": "Bearer " + os.environ["GENJOBS_API_KEY"], "Content-Type": "application/json"},',
      ')',
      'with urllib.request.urlopen(req) as res:',
      '    print(res.status, json.load(res))',
    ].join('\n'),
  }
}

function CopyAs ({ request }: { request: Details['request'] }) {
  const all = snippets(location.origin, request)
  const [tab, setTab] = useState<keyof typeof all>('curl')
  const [copied, setCopied] = useState<string | null>(null)
  const names = Object.keys(all) as Array<keyof typeof all>
  const onKey = (e: KeyboardEvent) => {
    const i = names.indexOf(tab)
    if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
      const next = names[(i + (e.key === 'ArrowRight' ? 1 : names.length - 1)) % names.length]
      setTab(next)
      document.getElementById(`tab-${next}`)?.focus()
    }
  }
  return (
    <Card title="Reproduce this request" actions={
      <button type="button" data-testid="copy-snippet" onClick={async () => { await copyText(all[tab]); setCopied(tab) }}>{copied === tab ? 'Copied' : `Copy ${tab}`}</button>
    }>
      <div role="tablist" aria-label="Language" class="tabs" onKeyDown={onKey}>
        {names.map(n => (
          <button type="button" role="tab" id={`tab-${n}`} aria-selected={tab === n} aria-controls="snippet" tabIndex={tab === n ? 0 : -1}
            class={tab === n ? 'tab active' : 'tab'} onClick={() => setTab(n)}>{n}</button>
        ))}
      </div>
      <pre id="snippet" role="tabpanel" aria-labelledby={`tab-${tab}`} class="code" data-testid="snippet" tabIndex={0}>{all[tab]}</pre>
      <p class="muted small">The key is read from the GENJOBS_API_KEY environment variable; create one under API keys.</p>
    </Card>
  )
}

function Media ({ job }: { job: Job }) {
  if (job.status !== 'completed' || !job.result_url) return <p class="muted">{TERMINAL.has(job.status) ? 'No result.' : 'The result appears here when the job completes.'}</p>
  if (job.type === 'image') return <img class="media" src={job.result_url} alt={`Result of ${job.id}: ${job.prompt ?? ''}`} />
  if (job.type === 'audio') return <audio class="media" controls preload="metadata" src={job.result_url} aria-label={`Result of ${job.id}`} />
  return <video class="media" controls preload="metadata" src={job.result_url} aria-label={`Result of ${job.id}`} data-testid="job-video" />
}

/** An input value: media URLs as previews, the rest as text. */
function InputValue ({ name, value }: { name: string; value: unknown }) {
  const urls = (Array.isArray(value) ? value : [value]).filter((v): v is string => typeof v === 'string' && /^https?:\/\//.test(v))
  if (urls.length > 0 && /url/.test(name)) {
    return (
      <div class="row wrap">
        {urls.map(u => /image|frame/.test(name)
          ? <a href={u} target="_blank" rel="noreferrer"><img class="thumb" src={u} alt={`${name} input`} /></a>
          : <a class="mono small" href={u} target="_blank" rel="noreferrer">{u}</a>)}
      </div>
    )
  }
  return <span class={typeof value === 'string' ? '' : 'mono'}>{typeof value === 'string' ? value : JSON.stringify(value)}</span>
}

/** One job (README "Dashboard"): inputs, media, timeline, cost and refund, copy as code, cancel. */
export function JobPage ({ id }: { id: string }) {
  const [d, setD] = useState<Details | null>(null)
  const [error, setError] = useState<string | null>(null)
  const load = () => call<Details>('GET', `/v1/jobs/${encodeURIComponent(id)}/details`).then(setD, e => setError(errorText(e)))
  useEffect(() => { setD(null); setError(null); load() }, [id])
  const live = d !== null && !TERMINAL.has(d.job.status)
  useEffect(() => {
    if (!live) return
    return watchJob(id, (s) => setD(x => x && { ...x, job: { ...x.job, status: s.status, progress: s.progress } }), () => { load() })
  }, [id, live])
  const cancel = async () => {
    setError(null)
    try { await call('DELETE', `/v1/jobs/${encodeURIComponent(id)}`); await load() } catch (e) { setError(errorText(e)) }
  }
  if (!d) return <div class="stack"><a href="#/jobs">← All jobs</a><ErrorLine error={error} />{!error && <p class="muted">Loading…</p>}</div>
  const j = d.job
  return (
    <div class="stack" data-testid="job-page" data-status={j.status}>
      <a href="#/jobs">← All jobs</a>
      <Card title={`Job ${j.id}`} actions={j.status === 'queued' ? <button type="button" class="danger" onClick={cancel}>Cancel job</button> : undefined}>
        <ErrorLine error={error} />
        <div class="facts">
          <div><span class="muted small">Status</span><span class={`pill ${j.status}`} data-testid="status">{j.status}</span>{live && <div class="progress" role="progressbar" aria-label="Progress" aria-valuenow={j.progress} aria-valuemin={0} aria-valuemax={100}><span style={{ width: `${j.progress}%` }} /></div>}</div>
          <div><span class="muted small">Type · model</span>{j.type} · {j.model}</div>
          <div><span class="muted small">Charged</span><strong data-testid="charged">{j.credits_charged}</strong> credits</div>
          <div><span class="muted small">Refunded</span><span class={j.credits_refunded > 0 ? 'pos' : ''} data-testid="refunded">{j.credits_refunded}</span></div>
          <div><span class="muted small">Created</span>{fmtDate(j.created_at)}</div>
          <div><span class="muted small">Finished</span>{fmtDate(j.completed_at)}</div>
        </div>
        {j.error_message && <p class="error">{j.error_message}{j.content_policy_violation ? ' (content policy)' : ''}</p>}
      </Card>
      <div class="two">
        <Card title="Result"><Media job={j} /></Card>
        <Card title="Inputs">
          <table data-testid="inputs">
            <tbody>{Object.entries(d.request.body).map(([k, v]) => <tr><th scope="row">{k}</th><td><InputValue name={k} value={v} /></td></tr>)}</tbody>
          </table>
        </Card>
      </div>
      <Card title="Timeline">
        <ol class="timeline" data-testid="timeline">
          {d.timeline.map(e => (
            <li data-kind={e.kind}><span class="mono small muted">{fmtDate(e.at)}</span> <span class={`pill ${e.kind}`}>{e.kind}</span> {e.message}</li>
          ))}
        </ol>
      </Card>
      <CopyAs request={d.request} />
    </div>
  )
}
