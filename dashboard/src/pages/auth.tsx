import { useState } from 'preact/hooks'
import { call, errorText } from '../api.js'
import { Card, ErrorLine } from '../ui.js'

/** Sign up (POST /v1/auth/signup) and log in (POST /v1/auth/login) for a session JWT. */
export function AuthPage ({ onLogin }: { onLogin: (token: string) => void }) {
  const [mode, setMode] = useState<'login' | 'signup'>('login')
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const [error, setError] = useState<string | null>(null)
  const [note, setNote] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)

  const submit = async (e: Event) => {
    e.preventDefault()
    setError(null); setBusy(true)
    try {
      if (mode === 'signup') {
        await call('POST', '/v1/auth/signup', { email, password }, { anonymous: true })
        setNote('Account created with 200 free credits. An operator verifies your email before you can create API keys.')
      }
      const r = await call<{ token: string }>('POST', '/v1/auth/login', { email, password }, { anonymous: true })
      onLogin(r.token)
    } catch (err) { setError(errorText(err)) } finally { setBusy(false) }
  }

  return (
    <div class="narrow">
      <Card title={mode === 'login' ? 'Log in' : 'Sign up'}>
        <form onSubmit={submit} class="stack">
          <label>Email <input name="email" type="email" required autoComplete="username" value={email} onInput={(e) => setEmail((e.target as HTMLInputElement).value)} /></label>
          <label>Password <input name="password" type="password" required minLength={mode === 'signup' ? 8 : 1} autoComplete={mode === 'signup' ? 'new-password' : 'current-password'} value={password} onInput={(e) => setPassword((e.target as HTMLInputElement).value)} /></label>
          <button type="submit" disabled={busy}>{mode === 'login' ? 'Log in' : 'Create account'}</button>
          <ErrorLine error={error} />
          {note && <p class="note">{note}</p>}
        </form>
        <p class="muted">
          {mode === 'login'
            ? <>No account? <a href="#" data-testid="to-signup" onClick={(e) => { e.preventDefault(); setMode('signup'); setError(null) }}>Sign up</a></>
            : <>Have an account? <a href="#" onClick={(e) => { e.preventDefault(); setMode('login'); setError(null) }}>Log in</a></>}
        </p>
      </Card>
    </div>
  )
}
