import { render } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import { call, session, whenSessionEnds } from './api.js'
import { AuthPage } from './pages/auth.js'
import { OverviewPage } from './pages/overview.js'
import { JobsPage } from './pages/jobs.js'
import { KeysPage } from './pages/keys.js'
import { WebhookPage, WebhooksPage } from './pages/webhooks.js'
import { JobPage } from './pages/job.js'
import { OperatorPage } from './pages/operator.js'
import 'uplot/dist/uPlot.min.css'
import './style.css'

const PAGES = [
  { id: 'overview', title: 'Overview', view: OverviewPage },
  { id: 'jobs', title: 'Jobs', view: JobsPage },
  { id: 'keys', title: 'API keys', view: KeysPage },
  { id: 'webhooks', title: 'Webhooks', view: WebhooksPage },
] as const

/** Pages are addressed by the location hash (#/jobs), so every URL under /dashboard serves the same file. */
function useHash (): string {
  const read = () => location.hash.replace(/^#\/?/, '') || 'overview'
  const [h, setH] = useState(read())
  useEffect(() => {
    const on = () => setH(read())
    addEventListener('hashchange', on)
    return () => removeEventListener('hashchange', on)
  }, [])
  return h
}

function App () {
  const [token, setToken] = useState(session.get())
  const [me, setMe] = useState<{ email: string; credits: number } | null>(null)
  const page = useHash()
  useEffect(() => { whenSessionEnds(() => { session.clear(); setToken(null) }) }, [])
  useEffect(() => {
    if (!token) { setMe(null); return }
    call('GET', '/v1/auth/me').then(setMe, () => {})
  }, [token])

  if (page === 'operator') return <Shell page={page} email={null} onLogout={null}><OperatorPage /></Shell>
  if (!token) return <Shell page={page} email={null} onLogout={null}><AuthPage onLogin={(t) => { session.set(t); setToken(t) }} /></Shell>
  // Pages of one thing: #/jobs/<job id>, #/webhooks/<webhook id>.
  const [section, sub] = page.split('/', 2)
  const P = PAGES.find(p => p.id === section) ?? PAGES[0]
  const View = P.view
  const logout = () => { session.clear(); setToken(null) }
  let body = <View />
  if (sub && P.id === 'jobs') body = <JobPage id={decodeURIComponent(sub)} />
  else if (sub && P.id === 'webhooks' && /^\d+$/.test(sub)) body = <WebhookPage id={Number(sub)} />
  return <Shell page={P.id} email={me?.email ?? null} onLogout={logout}>{body}</Shell>
}

function Shell ({ page, email, onLogout, children }: { page: string; email: string | null; onLogout: (() => void) | null; children: any }) {
  return (
    <div class="shell">
      <a class="skip" href="#main">Skip to content</a>
      <nav aria-label="Dashboard">
        <span class="brand">genjobs</span>
        {onLogout && PAGES.map(p => <a href={`#/${p.id}`} class={p.id === page ? 'active' : ''} aria-current={p.id === page ? 'page' : undefined}>{p.title}</a>)}
        <a href="#/operator" class={page === 'operator' ? 'active' : ''} aria-current={page === 'operator' ? 'page' : undefined}>Operator</a>
        <span class="grow" />
        <a href="/v1/docs" target="_blank" rel="noreferrer">API reference</a>
        {email && <span class="muted" data-testid="whoami">{email}</span>}
        {onLogout && <button type="button" class="secondary" onClick={onLogout}>Log out</button>}
        {!onLogout && page === 'operator' && <a href="#/overview">Back to the dashboard</a>}
      </nav>
      <main id="main" tabIndex={-1}>{children}</main>
    </div>
  )
}

render(<App />, document.getElementById('app')!)
