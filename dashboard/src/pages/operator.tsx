import { useEffect, useState } from 'preact/hooks'
import { adminToken, call, errorText, fmtDate } from '../api.js'
import { Card, ErrorLine, Pager } from '../ui.js'

interface Account {
  user_id: number; email: string; credits: number; tier: string; email_verified: boolean; banned: boolean; credits_locked: boolean
  has_purchased: boolean; enterprise: boolean; created_at: string
}
interface List<T> { data: T[]; total: number; limit: number; offset: number }

/** The operator view (DESIGN.md 7 operator API, Bearer ADMIN_TOKEN kept in this tab only). */
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
      <Card title="Accounts" actions={
        <div class="row">
          <input type="search" placeholder="email contains…" value={q} onInput={(e) => { setQ((e.target as HTMLInputElement).value); setOffset(0) }} />
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
                  <input class="amount" type="number" min={1} placeholder="credits" value={amounts[a.user_id] ?? ''} onInput={(e) => setAmounts({ ...amounts, [a.user_id]: (e.target as HTMLInputElement).value })} />
                  <button type="button" class="secondary" onClick={() => credit(a, 'grants')}>Grant</button>
                  <button type="button" class="secondary" onClick={() => credit(a, 'purchases')}>Purchase</button>
                </div></td>
              </tr>
            ))}
          </tbody>
        </table>
        {list && <Pager total={list.total} limit={list.limit} offset={list.offset} onPage={setOffset} />}
      </Card>
    </div>
  )
}
