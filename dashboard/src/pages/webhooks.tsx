import { useEffect, useState } from 'preact/hooks'
import { call, errorText, fmtDate } from '../api.js'
import { Card, ErrorLine, Pager, SecretOnce } from '../ui.js'

interface Hook { id: number; url: string; events: string[]; active: boolean; created_at: string }
interface Attempt {
  attempt: number; attempted_at: string; status_code: number | null; latency_ms: number | null; error: string | null
  response_excerpt: string | null; manual: boolean
}
interface Delivery {
  id: string; event: string; job_id: string | null; status: string; attempts: number; last_status_code: number | null; last_error: string | null
  last_latency_ms: number | null; next_attempt_at: string | null; created_at: string; delivered_at: string | null
  request_body: unknown; attempts_history: Attempt[]
}
/** POST .../test and .../redeliver: what the receiver said. */
interface SendResult {
  delivery_id: string; event: string; attempt: number; delivered: boolean; status: string; status_code: number | null
  latency_ms: number | null; error: string | null; response_excerpt: string | null; next_attempt_at: string | null
}
interface List<T> { data: T[]; total: number; limit: number; offset: number }

function Result ({ r, what }: { r: SendResult; what: string }) {
  return (
    <div class={`result ${r.delivered ? 'ok' : 'bad'}`} role="status" data-testid="send-result" data-delivered={String(r.delivered)} data-delivery={r.delivery_id}>
      <strong>{what}: {r.delivered ? 'delivered' : 'not delivered'}</strong>
      {' '}· answer <span data-testid="result-code">{r.status_code ?? 'none'}</span>
      {r.latency_ms !== null && <> · {r.latency_ms} ms</>}
      {' '}· delivery now <span class={`pill ${r.status}`}>{r.status}</span>
      {r.error && <div class="error small">{r.error}</div>}
      {r.response_excerpt && <pre class="code small" aria-label="Response excerpt" tabIndex={0}>{r.response_excerpt}</pre>}
    </div>
  )
}

function Deliveries ({ hook, reloadKey, onSent }: { hook: Hook; reloadKey?: number; onSent?: (r: SendResult) => void }) {
  const [list, setList] = useState<List<Delivery> | null>(null)
  const [offset, setOffset] = useState(0)
  const [status, setStatus] = useState('')
  const [open, setOpen] = useState<string | null>(null)
  const [busy, setBusy] = useState<string | null>(null)
  const [error, setError] = useState<string | null>(null)
  const load = () => {
    const p = new URLSearchParams({ limit: '10', offset: String(offset) })
    if (status) p.set('status', status)
    return call<List<Delivery>>('GET', `/v1/webhooks/${hook.id}/deliveries?${p}`).then(setList, e => setError(errorText(e)))
  }
  useEffect(() => { load() }, [hook.id, offset, status, reloadKey])
  const redeliver = async (d: Delivery) => {
    setError(null); setBusy(d.id)
    try { onSent?.(await call<SendResult>('POST', `/v1/webhooks/${hook.id}/deliveries/${d.id}/redeliver`)); await load() } catch (e) { setError(errorText(e)) } finally { setBusy(null) }
  }
  return (
    <div class="deliveries">
      <div class="row wrap">
        <label>Status
          <select name="delivery_status" value={status} onChange={(e) => { setOffset(0); setStatus((e.target as HTMLSelectElement).value) }}>
            <option value="">any</option>
            {['pending', 'delivered', 'failed', 'disabled'].map(s => <option value={s}>{s}</option>)}
          </select>
        </label>
        <button type="button" class="secondary" onClick={load}>Refresh</button>
      </div>
      <ErrorLine error={error} />
      <table>
        <thead><tr><th>Delivery</th><th>Event</th><th>Job</th><th>Status</th><th class="num">Attempts</th><th>Last answer</th><th>When</th><th><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>
          {list?.data.map(d => [
            <tr data-delivery={d.id} data-status={d.status}>
              <td class="mono small">{d.id}</td><td>{d.event}</td><td class="mono small">{d.job_id ? <a href={`#/jobs/${d.job_id}`}>{d.job_id}</a> : '-'}</td>
              <td><span class={`pill ${d.status}`}>{d.status}</span></td><td class="num">{d.attempts}</td>
              <td>{d.last_status_code ?? ''} {d.last_error ? <span class="error small">{d.last_error}</span> : null} {d.last_latency_ms !== null ? <span class="muted small">{d.last_latency_ms} ms</span> : null}</td>
              <td>{fmtDate(d.delivered_at ?? d.created_at)}{d.next_attempt_at && d.status === 'pending' ? <div class="muted small">next {fmtDate(d.next_attempt_at)}</div> : null}</td>
              <td><div class="row">
                <button type="button" class="secondary" aria-expanded={open === d.id} onClick={() => setOpen(open === d.id ? null : d.id)}>{open === d.id ? 'Hide' : 'Details'}</button>
                <button type="button" disabled={busy !== null} onClick={() => redeliver(d)}>{busy === d.id ? 'Sending…' : 'Redeliver'}</button>
              </div></td>
            </tr>,
            open === d.id
              ? <tr><td colSpan={8}>
                <div class="two">
                  <div><h3>Request body</h3><pre class="code small" tabIndex={0} aria-label={`Request body of ${d.id}`}>{JSON.stringify(d.request_body, null, 2)}</pre></div>
                  <div><h3>Attempts</h3>
                    <table><thead><tr><th>#</th><th>At</th><th>Answer</th><th class="num">ms</th><th>Response</th></tr></thead>
                      <tbody>{d.attempts_history.map(a => (
                        <tr><td>{a.attempt}{a.manual ? ' (manual)' : ''}</td><td class="small">{fmtDate(a.attempted_at)}</td><td>{a.status_code ?? '-'}</td><td class="num">{a.latency_ms ?? '-'}</td>
                          <td class="small">{a.response_excerpt ? <code>{a.response_excerpt}</code> : a.error ? <span class="error">{a.error}</span> : '-'}</td></tr>
                      ))}</tbody></table>
                  </div>
                </div>
              </td></tr>
              : null,
          ])}
        </tbody>
      </table>
      {list && list.total === 0 && <p class="muted">No deliveries yet.</p>}
      {list && <Pager total={list.total} limit={list.limit} offset={list.offset} onPage={setOffset} />}
    </div>
  )
}

/** One webhook endpoint (README "Dashboard"): send a test event, deliveries with redeliver, rotate the secret. */
export function WebhookPage ({ id }: { id: number }) {
  const [hook, setHook] = useState<Hook | null>(null)
  const [result, setResult] = useState<{ r: SendResult; what: string } | null>(null)
  const [secret, setSecret] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const [reload, setReload] = useState(0)
  const [error, setError] = useState<string | null>(null)
  useEffect(() => {
    call<List<Hook>>('GET', '/v1/webhooks?limit=100').then(r => {
      const h = r.data.find(x => x.id === id)
      if (h) setHook(h); else setError(`WEBHOOK_NOT_FOUND: no webhook ${id} on this account`)
    }, e => setError(errorText(e)))
  }, [id])
  const test = async () => {
    setError(null); setBusy(true)
    try { setResult({ r: await call<SendResult>('POST', `/v1/webhooks/${id}/test`), what: 'Test event' }); setReload(n => n + 1) } catch (e) { setError(errorText(e)) } finally { setBusy(false) }
  }
  const rotate = async () => {
    if (!confirm('Rotate the signing secret? The current one stops working at once.')) return
    setError(null)
    try { setSecret((await call<Hook & { secret: string }>('POST', `/v1/webhooks/${id}/rotate-secret`)).secret) } catch (e) { setError(errorText(e)) }
  }
  return (
    <div class="stack" data-testid="webhook-page">
      <a href="#/webhooks">← All webhooks</a>
      <Card title={hook ? `Webhook ${hook.id}` : `Webhook ${id}`} actions={hook && (
        <div class="row">
          <button type="button" disabled={busy} onClick={test}>{busy ? 'Sending…' : 'Send test event'}</button>
          <button type="button" class="secondary" onClick={rotate}>Rotate secret</button>
        </div>
      )}>
        <ErrorLine error={error} />
        {hook && (
          <div class="facts">
            <div><span class="muted small">URL</span><span class="mono" data-testid="hook-url">{hook.url}</span></div>
            <div><span class="muted small">Events</span>{hook.events.join(', ')}</div>
            <div><span class="muted small">Active</span>{hook.active ? 'yes' : 'no (disabled)'}</div>
            <div><span class="muted small">Created</span>{fmtDate(hook.created_at)}</div>
          </div>
        )}
        {result && <Result r={result.r} what={result.what} />}
        {secret && <SecretOnce label="New signing secret" value={secret} onDone={() => setSecret(null)} />}
      </Card>
      {hook && <Card title="Deliveries"><Deliveries hook={hook} reloadKey={reload} onSent={(r) => setResult({ r, what: `Redelivery of ${r.delivery_id}` })} /></Card>}
    </div>
  )
}

/** Webhooks (SPEC.md 4.12): register (secret shown once), delete, delivery history; each opens its endpoint page. */
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
          <thead><tr><th>URL</th><th>Events</th><th>Active</th><th>Created</th><th><span class="sr-only">Actions</span></th></tr></thead>
          <tbody>
            {hooks?.map(h => [
              <tr data-hook={h.id}>
                <td class="mono"><a href={`#/webhooks/${h.id}`}>{h.url}</a></td><td>{h.events.join(', ')}</td><td>{h.active ? 'yes' : 'no (disabled)'}</td><td>{fmtDate(h.created_at)}</td>
                <td><div class="row">
                  <a class="button secondary" href={`#/webhooks/${h.id}`}>Manage</a>
                  <button type="button" class="secondary" aria-expanded={open === h.id} onClick={() => setOpen(open === h.id ? null : h.id)}>{open === h.id ? 'Hide' : 'Deliveries'}</button>
                  <button type="button" class="danger" onClick={() => remove(h)}>Delete</button>
                </div></td>
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
