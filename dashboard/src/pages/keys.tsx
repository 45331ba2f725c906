import { useEffect, useState } from 'preact/hooks'
import { call, errorText, fmtDate } from '../api.js'
import { Card, ErrorLine, SecretOnce } from '../ui.js'

interface Key {
  id: number; prefix: string; name: string | null; tier: string; scopes: string[]; rate_limit_rpm: number; last_used_at: string | null
  expires_at: string | null; created_at: string
}

/** API keys (SPEC.md 4.2, session only): create with name and expiry, rotate, revoke, last used. */
export function KeysPage () {
  const [keys, setKeys] = useState<Key[] | null>(null)
  const [name, setName] = useState('')
  const [days, setDays] = useState('')
  const [secret, setSecret] = useState<{ label: string; value: string } | null>(null)
  const [error, setError] = useState<string | null>(null)

  const load = () => call<{ keys: Key[] }>('GET', '/v1/auth/keys').then(r => setKeys(r.keys), e => setError(errorText(e)))
  useEffect(() => { load() }, [])

  const create = async (e: Event) => {
    e.preventDefault()
    setError(null)
    try {
      const body: Record<string, unknown> = {}
      if (name) body.name = name
      if (days) body.expires_in_days = Number(days)
      const k = await call<{ key: string; prefix: string }>('POST', '/v1/auth/keys', body)
      setSecret({ label: `New key ${k.prefix}…`, value: k.key })
      setName(''); setDays('')
      load()
    } catch (err) { setError(errorText(err)) }
  }
  const rotate = async (k: Key) => {
    if (!confirm(`Rotate ${k.prefix}…? The old secret stops working now.`)) return
    try {
      const r = await call<{ key: string; prefix: string }>('POST', `/v1/auth/keys/${k.id}/rotate`)
      setSecret({ label: `Rotated key ${r.prefix}…`, value: r.key })
      load()
    } catch (err) { setError(errorText(err)) }
  }
  const revoke = async (k: Key) => {
    if (!confirm(`Revoke ${k.prefix}…? Requests with it fail from now on.`)) return
    try { await call('DELETE', `/v1/auth/keys/${k.id}`); load() } catch (err) { setError(errorText(err)) }
  }

  return (
    <div class="stack">
      <Card title="Create an API key">
        <form class="row wrap" onSubmit={create} data-testid="create-key">
          <label>Name <input name="name" maxLength={100} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} placeholder="production" /></label>
          <label>Expires in (days) <input name="expires_in_days" type="number" min={1} max={3650} value={days} onInput={(e) => setDays((e.target as HTMLInputElement).value)} placeholder="never" /></label>
          <button type="submit">Create key</button>
        </form>
        {secret && <SecretOnce label={secret.label} value={secret.value} onDone={() => setSecret(null)} />}
        <ErrorLine error={error} />
      </Card>
      <Card title="Your keys">
        <table data-testid="keys">
          <thead><tr><th>Key</th><th>Name</th><th>Tier</th><th>Scopes</th><th>Last used</th><th>Expires</th><th>Created</th><th /></tr></thead>
          <tbody>
            {keys?.map(k => (
              <tr data-key={k.id}>
                <td class="mono">{k.prefix}…</td>
                <td>{k.name ?? ''}</td>
                <td>{k.tier} <span class="muted small">{k.rate_limit_rpm}/min</span></td>
                <td>{k.scopes.join(', ')}</td>
                <td>{fmtDate(k.last_used_at)}</td>
                <td>{k.expires_at ? fmtDate(k.expires_at) : 'never'}</td>
                <td>{fmtDate(k.created_at)}</td>
                <td><div class="row"><button type="button" class="secondary" onClick={() => rotate(k)}>Rotate</button><button type="button" class="danger" onClick={() => revoke(k)}>Revoke</button></div></td>
              </tr>
            ))}
          </tbody>
        </table>
        {keys && keys.length === 0 && <p class="muted">No active keys.</p>}
      </Card>
    </div>
  )
}
