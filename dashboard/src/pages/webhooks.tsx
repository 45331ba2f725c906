import { useEffect, useState } from 'preact/hooks'
import { call, errorText, fmtDate } from '../api.js'
import { Card, ErrorLine, Pager, SecretOnce } from '../ui.js'

interface Hook { id: number; url: string; events: string[]; active: boolean; created_at: string }
interface Delivery {
  id: string; event: string; job_id: string; status: string; attempts: number; last_status_code: number | null; last_error: string | null
  last_latency_ms: number | null; next_attempt_at: string | null; created_at: string; delivered_at: string | null
}
interface List<T> { data: T[]; total: number; limit: number; offset: number }

function Deliveries ({ hook }: { hook: Hook }) {
  const [list, setList] = useState<List<Delivery> | null>(null)
  const [offset, setOffset] = useState(0)
  const [error, setError] = useState<string | null>(null)
  useEffect(() => { call<List<Delivery>>('GET', `/v1/webhooks/${hook.id}/deliveries?limit=10&offset=${offset}`).then(setList, e => setError(errorText(e))) }, [hook.id, offset])
  return (
    <div class="deliveries">
      <ErrorLine error={error} />
      <table>
        <thead><tr><th>Delivery</th><th>Event</th><th>Job</th><th>Status</th><th class="num">Attempts</th><th>Last answer</th><th>When</th></tr></thead>
        <tbody>
          {list?.data.map(d => (
            <tr>
              <td class="mono small">{d.id}</td><td>{d.event}</td><td class="mono small">{d.job_id}</td>
              <td><span class={`pill ${d.status}`}>{d.status}</span></td><td class="num">{d.attempts}</td>
              <td>{d.last_status_code ?? ''} {d.last_error ? <span class="error small">{d.last_error}</span> : null} {d.last_latency_ms !== null ? <span class="muted small">{d.last_latency_ms} ms</span> : null}</td>
              <td>{fmtDate(d.delivered_at ?? d.created_at)}{d.next_attempt_at && d.status === 'pending' ? <div class="muted small">next {fmtDate(d.next_attempt_at)}</div> : null}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {list && list.total === 0 && <p class="muted">No deliveries yet.</p>}
      {list && <Pager total={list.total} limit={list.limit} offset={list.offset} onPage={setOffset} />}
    </div>
  )
}

/** Webhooks (SPEC.md 4.12): register (secret shown once), delete, delivery history. */
export function WebhooksPage () {
  const [hooks, setHooks] = useState<Hook[] | null>(null)
  const [url, setUrl] = useState('')
  const [events, setEvents] = useState<Record<string, boolean>>({ 'job.completed': true, 'job.failed': true })
  const [secret, setSecret] = useState<string | null>(null)
  const [open, setOpen] = useState<number | null>(null)
  const [error, setError] = useState<string | null>(null)

  const load = () => call<List<Hook>>('GET', '/v1/webhooks?limit=100').then(r => setHooks(r.data), e => setError(errorText(e)))
  useEffect(() => { load() }, [])

  const create = async (e: Event) => {
    e.preventDefault()
    setError(null)
    try {
      const r = await call<Hook & { secret: string }>('POST', '/v1/webhooks', { url, events: Object.keys(events).filter(k => events[k]) })
      setSecret(r.secret); setUrl(''); load()
    } catch (err) { setError(errorText(err)) }
  }
  const remove = async (h: Hook) => {
    if (!confirm(`Delete the webhook to ${h.url}?`)) return
    try { await call('DELETE', `/v1/webhooks/${h.id}`); load() } catch (err) { setError(errorText(err)) }
  }

  return (
    <div class="stack">
      <Card title="Register a webhook">
        <form class="row wrap" onSubmit={create}>
          <label class="grow">URL (https) <input name="url" type="url" required value={url} onInput={(e) => setUrl((e.target as HTMLInputElement).value)} placeholder="https://example.com/hooks/genjobs" /></label>
          {['job.completed', 'job.failed'].map(ev => (
            <label class="check"><input type="checkbox" checked={events[ev]} onChange={(e) => setEvents({ ...events, [ev]: (e.target as HTMLInputElement).checked })} /> {ev}</label>
          ))}
          <button type="submit">Register</button>
        </form>
        {secret && <SecretOnce label="Signing secret" value={secret} onDone={() => setSecret(null)} />}
        <ErrorLine error={error} />
      </Card>
      <Card title="Webhooks">
        <table>
          <thead><tr><th>URL</th><th>Events</th><th>Active</th><th>Created</th><th /></tr></thead>
          <tbody>
            {hooks?.map(h => [
              <tr>
                <td class="mono">{h.url}</td><td>{h.events.join(', ')}</td><td>{h.active ? 'yes' : 'no (disabled)'}</td><td>{fmtDate(h.created_at)}</td>
                <td><div class="row"><button type="button" class="secondary" onClick={() => setOpen(open === h.id ? null : h.id)}>{open === h.id ? 'Hide' : 'Deliveries'}</button><button type="button" class="danger" onClick={() => remove(h)}>Delete</button></div></td>
              </tr>,
              open === h.id ? <tr><td colSpan={5}><Deliveries hook={h} /></td></tr> : null,
            ])}
          </tbody>
        </table>
        {hooks && hooks.length === 0 && <p class="muted">No webhooks.</p>}
      </Card>
    </div>
  )
}
