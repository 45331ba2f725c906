import { useEffect, useState } from 'preact/hooks'
import { adminToken, call, errorText, fmtDate } from '../api.js'
import { Card, ErrorLine, Pager } from '../ui.js'

interface Account {
  user_id: number; email: string; credits: number; tier: string; email_verified: boolean; banned: boolean; credits_locked: boolean
  has_purchased: boolean; enterprise: boolean; created_at: string
}
interface List<T> { data: T[]; total: number; limit: number; offset: number }
interface AdminJob {
  job: {
    id: string; status: string; type: string; model: string; prompt: string | null; credits_charged: number; credits_refunded: number
    error_message: string | null; created_at: string
  }
  account_id: number; provider: string; route: string | null; upstream: Record<string, unknown> | null; submitted_at: string | null
  deadline_at: string; owner: string | null
  upstream_events: Array<{ at: string; source: string; route: string | null; state: string; detail: unknown }>
}
interface RouteState {
  model: string; route: string; provider: string; upstream_model: string; breaker: string; in_flight: number; queued: number; max_concurrent: number | null
}
interface Failing {
  id: string; account_id: number; webhook_id: number | null; job_id: string | null; event: string; url: string; status: string; attempts: number
  last_status_code: number | null; last_error: string | null; next_attempt_at: string | null; created_at: string
}
const admin = { admin: true }

function CreateAccount ({ onCreated }: { onCreated: (email: string) => void }) {
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const [credits, setCredits] = useState('200')
  const [verified, setVerified] = useState(true)
  const [error, setError] = useState<string | null>(null)
  const submit = async (e: Event) => {
    e.preventDefault()
    setError(null)
    try {
      await call('POST', '/v1/admin/accounts', { email, password, verified, credits: Number(credits) }, admin)
      onCreated(email); setEmail(''); setPassword('')
    } catch (err) { setError(errorText(err)) }
  }
  return (
    <Card title="Create an account">
      <form class="row wrap" onSubmit={submit} data-testid="create-account">
        <label class="grow">Email <input name="new_email" type="email" required value={email} onInput={(e) => setEmail((e.target as HTMLInputElement).value)} /></label>
        <label>Password <input name="new_password" type="password" required minLength={8} autoComplete="new-password" value={password} onInput={(e) => setPassword((e.target as HTMLInputElement).value)} /></label>
        <label>Credits <input name="new_credits" class="amount" type="number" min={0} required value={credits} onInput={(e) => setCredits((e.target as HTMLInputElement).value)} /></label>
        <label class="check"><input type="checkbox" name="new_verified" checked={verified} onChange={(e) => setVerified((e.target as HTMLInputElement).checked)} /> email verified</label>
        <button type="submit">Create account</button>
      </form>
      <ErrorLine error={error} />
    </Card>
  )
}

/** GET /v1/admin/jobs/{id}: a job with its route, upstream handle and upstream history. */
function JobLookup () {
  const [id, setId] = useState('')
  const [job, setJob] = useState<AdminJob | null>(null)
  const [error, setError] = useState<string | null>(null)
  const find = async (e: Event) => {
    e.preventDefault()
    setError(null); setJob(null)
    try { setJob(await call<AdminJob>('GET', `/v1/admin/jobs/${encodeURIComponent(id.trim())}`, undefined, admin)) } catch (err) { setError(errorText(err)) }
  }
  return (
    <Card title="Find a job">
      <form class="row wrap" role="search" aria-label="Find a job" onSubmit={find}>
        <label class="grow">Job id <input name="admin_job_id" required value={id} onInput={(e) => setId((e.target as HTMLInputElement).value)} placeholder="job_…" /></label>
        <button type="submit">Find</button>
      </form>
      <ErrorLine error={error} />
      {job && (
        <div class="stack" data-testid="admin-job">
          <div class="facts">
            <div><span class="muted small">Job</span><span class="mono">{job.job.id}</span></div>
            <div><span class="muted small">Status</span><span class={`pill ${job.job.status}`}>{job.job.status}</span></div>
            <div><span class="muted small">Account</span>#{job.account_id}</div>
            <div><span class="muted small">Model · provider</span>{job.job.model} · {job.provider}</div>
            <div><span class="muted small">Route</span><span class="mono small">{job.route ?? '(simulated)'}</span></div>
            <div><span class="muted small">Upstream id</span><span class="mono small">{String(job.upstream?.id ?? '-')}</span></div>
            <div><span class="muted small">Credits</span>{job.job.credits_charged} charged, {job.job.credits_refunded} refunded</div>
            <div><span class="muted small">Deadline</span>{fmtDate(job.deadline_at)}</div>
          </div>
          {job.job.error_message && <p class="error">{job.job.error_message}</p>}
          <h3>Upstream history</h3>
          <table data-testid="upstream-events">
            <thead><tr><th>At</th><th>Source</th><th>State</th><th>Route</th><th>Detail</th></tr></thead>
            <tbody>{job.upstream_events.map(e => (
              <tr><td class="small">{fmtDate(e.at)}</td><td>{e.source}</td><td>{e.state}</td><td class="mono small">{e.route ?? '-'}</td><td class="mono small clip" title={JSON.stringify(e.detail)}>{e.detail === null ? '' : JSON.stringify(e.detail)}</td></tr>
            ))}</tbody>
          </table>
          {job.upstream_events.length === 0 && <p class="muted">No upstream event recorded (simulated provider).</p>}
        </div>
      )}
    </Card>
  )
}

/** GET /v1/admin/providers: each route's breaker, in flight, queued and cap on this node. */
function Providers () {
  const [routes, setRoutes] = useState<RouteState[] | null>(null)
  const [error, setError] = useState<string | null>(null)
  const load = () => call<{ providers: RouteState[] }>('GET', '/v1/admin/providers', undefined, admin).then(r => setRoutes(r.providers), e => setError(errorText(e)))
  useEffect(() => { load() }, [])
  return (
    <Card title="Provider routes" actions={<button type="button" class="secondary" onClick={load}>Refresh</button>}>
      <ErrorLine error={error} />
      <table data-testid="provider-routes">
        <thead><tr><th>Model</th><th>Provider · upstream model</th><th>Breaker</th><th class="num">In flight</th><th class="num">Queued</th><th class="num">Cap</th></tr></thead>
        <tbody>{routes?.map(r => (
          <tr><td>{r.model}</td><td>{r.provider} · <span class="mono small">{r.upstream_model}</span></td><td><span class={`pill ${r.breaker === 'open' ? 'failed' : 'completed'}`}>{r.breaker}</span></td>
            <td class="num">{r.in_flight}</td><td class="num">{r.queued}</td><td class="num">{r.max_concurrent ?? '-'}</td></tr>
        ))}</tbody>
      </table>
      {routes && routes.length === 0 && <p class="muted">No PROVIDERS_FILE routes: every model runs on the simulated provider.</p>}
    </Card>
  )
}

/** GET /v1/admin/deliveries: webhook deliveries failing across every account. */
function FailingDeliveries () {
  const [which, setWhich] = useState('both')
  const [offset, setOffset] = useState(0)
  const [list, setList] = useState<List<Failing> | null>(null)
  const [error, setError] = useState<string | null>(null)
  const load = () => call<List<Failing>>('GET', `/v1/admin/deliveries?status=${which}&limit=20&offset=${offset}`, undefined, admin).then(setList, e => setError(errorText(e)))
  useEffect(() => { load() }, [which, offset])
  return (
    <Card title="Failing deliveries" actions={
      <div class="row">
        <label>Show <select name="failing_status" value={which} onChange={(e) => { setOffset(0); setWhich((e.target as HTMLSelectElement).value) }}>
          <option value="both">failed or retrying</option><option value="failed">failed for good</option><option value="retrying">retrying</option>
        </select></label>
        <button type="button" class="secondary" onClick={load}>Refresh</button>
      </div>
    }>
      <ErrorLine error={error} />
      <table data-testid="failing-deliveries">
        <thead><tr><th>Delivery</th><th>Account</th><th>Event · job</th><th>URL</th><th>Status</th><th class="num">Attempts</th><th>Last answer</th></tr></thead>
        <tbody>{list?.data.map(d => (
          <tr><td class="mono small">{d.id}<div class="muted">{fmtDate(d.created_at)}</div></td><td>#{d.account_id}</td><td>{d.event}<div class="mono small">{d.job_id ?? '-'}</div></td>
            <td class="mono small clip" title={d.url}>{d.url}</td><td><span class={`pill ${d.status}`}>{d.status}</span>{d.next_attempt_at && <div class="muted small">next {fmtDate(d.next_attempt_at)}</div>}</td>
            <td class="num">{d.attempts}</td><td class="small">{d.last_status_code ?? '-'} <span class="error">{d.last_error ?? ''}</span></td></tr>
        ))}</tbody>
      </table>
      {list && list.total === 0 && <p class="muted">Nothing failing.</p>}
      {list && <Pager total={list.total} limit={list.limit} offset={list.offset} onPage={setOffset} />}
    </Card>
  )
}

/**
 * The operator console (DESIGN.md 7 operator API, Bearer ADMIN_TOKEN kept in this tab only):
 * accounts (search, create, verify, ban, grant, purchase), a job's upstream history, provider
 * routes, failing webhook deliveries.
 */
export function OperatorPage () {
  const [token, setToken] = useState(adminToken.get())
  const [input, setInput] = useState('')
  const [q, setQ] = useState('')
  const [offset, setOffset] = useState(0)
  const [list, setList] = useState<List<Account> | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [amounts, setAmounts] = useState<Record<number, string>>({})

  const load = () => {
    const p = new URLSearchParams({ limit: '20', offset: String(offset) })
    if (q) p.set('q', q)
    return call<List<Account>>('GET', `/v1/admin/accounts?${p}`, undefined, { admin: true }).then(l => { setList(l); setError(null) }, e => setError(errorText(e)))
  }
  useEffect(() => { if (token) load() }, [token, offset, q])

  const act = async (path: string, method: string, body: unknown) => {
    setError(null)
    try { await call(method, path, body, { admin: true }); await load() } catch (e) { setError(errorText(e)) }
  }
  const credit = (a: Account, what: 'grants' | 'purchases') => {
    const n = Number(amounts[a.user_id] ?? '')
    if (!Number.isInteger(n) || n < 1) { setError('Enter a whole number of credits first'); return }
    act(`/v1/admin/accounts/${a.user_id}/${what}`, 'POST', { credits: n })
  }

  if (!token) {
    return (
      <div class="narrow">
        <Card title="Operator">
          <form class="stack" onSubmit={(e) => { e.preventDefault(); adminToken.set(input.trim()); setToken(input.trim()) }}>
            <label>ADMIN_TOKEN <input name="admin_token" type="password" required value={input} onInput={(e) => setInput((e.target as HTMLInputElement).value)} /></label>
            <button type="submit">Open the operator view</button>
            <p class="muted">The token is kept in this browser tab only.</p>
          </form>
        </Card>
      </div>
    )
  }
  return (
    <div class="stack">
      <CreateAccount onCreated={(email) => { setOffset(0); setQ(email) }} />
      <Card title="Accounts" actions={
        <div class="row">
          <input type="search" aria-label="Search accounts by email" placeholder="email contains…" value={q} onInput={(e) => { setQ((e.target as HTMLInputElement).value); setOffset(0) }} />
          <button type="button" class="secondary" onClick={() => { adminToken.clear(); setToken(null); setList(null) }}>Forget token</button>
        </div>
      }>
        <ErrorLine error={error} />
        <table data-testid="accounts">
          <thead><tr><th>Account</th><th class="num">Credits</th><th>Tier</th><th>Flags</th><th>Actions</th><th>Credits</th></tr></thead>
          <tbody>
            {list?.data.map(a => (
              <tr data-account={a.email}>
                <td>{a.email}<div class="muted small">#{a.user_id} · {fmtDate(a.created_at)}</div></td>
                <td class="num">{a.credits}</td>
                <td>{a.tier}</td>
                <td>{a.email_verified ? <span class="pill completed">verified</span> : <span class="pill queued">unverified</span>} {a.banned && <span class="pill failed">banned</span>} {a.credits_locked && <span class="pill failed">locked</span>}</td>
                <td><div class="row">
                  {!a.email_verified && <button type="button" onClick={() => act(`/v1/admin/accounts/${a.user_id}`, 'PATCH', { email_verified: true })}>Verify</button>}
                  <button type="button" class={a.banned ? 'secondary' : 'danger'} onClick={() => act(`/v1/admin/accounts/${a.user_id}`, 'PATCH', { banned: !a.banned })}>{a.banned ? 'Unban' : 'Ban'}</button>
                </div></td>
                <td><div class="row">
                  <input class="amount" type="number" min={1} placeholder="credits" aria-label={`Credits for ${a.email}`} value={amounts[a.user_id] ?? ''} onInput={(e) => setAmounts({ ...amounts, [a.user_id]: (e.target as HTMLInputElement).value })} />
                  <button type="button" class="secondary" onClick={() => credit(a, 'grants')}>Grant</button>
                  <button type="button" class="secondary" onClick={() => credit(a, 'purchases')}>Purchase</button>
                </div></td>
              </tr>
            ))}
          </tbody>
        </table>
        {list && <Pager total={list.total} limit={list.limit} offset={list.offset} onPage={setOffset} />}
      </Card>
      <JobLookup />
      <Providers />
      <FailingDeliveries />
    </div>
  )
}
