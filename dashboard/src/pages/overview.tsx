import { useEffect, useState } from 'preact/hooks'
import { call, errorText, fmtDate } from '../api.js'
import { UsageChart, type Daily } from '../chart.js'
import { Card, ErrorLine, Pager } from '../ui.js'

interface Credits { credits: number; tier: string; has_purchased: boolean; free_trial: { credits_granted: number; video_used: boolean } }
interface Summary {
  from: string; to: string; requests: number; credits_charged: number; credits_refunded: number; net_credits: number
  jobs_by_status: Record<string, number>; jobs_by_model: Record<string, number>; daily: Daily[]
}
interface Entry { id: number; kind: string; delta: number; job_id: string | null; note: string | null; created_at: string }
interface List<T> { data: T[]; total: number; limit: number; offset: number; has_more: boolean }

function Bars ({ title, values }: { title: string; values: Record<string, number> }) {
  const entries = Object.entries(values).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1])
  const max = Math.max(1, ...entries.map(([, n]) => n))
  return (
    <div class="bars" data-testid={`bars-${title.toLowerCase().replace(/\W+/g, '-')}`}>
      <h3>{title}</h3>
      {entries.length === 0 && <p class="muted">None in this period.</p>}
      {entries.map(([k, n]) => (
        <div class="bar"><span class="label">{k}</span><span class="fill" style={{ width: `${(n / max) * 100}%` }} /><span class="n">{n}</span></div>
      ))}
    </div>
  )
}

/** Credits, the usage summary with its chart, and the credit ledger. */
export function OverviewPage () {
  const [credits, setCredits] = useState<Credits | null>(null)
  const [summary, setSummary] = useState<Summary | null>(null)
  const [ledger, setLedger] = useState<List<Entry> | null>(null)
  const [kind, setKind] = useState('')
  const [offset, setOffset] = useState(0)
  const [error, setError] = useState<string | null>(null)

  useEffect(() => {
    call<Credits>('GET', '/v1/credits').then(setCredits, e => setError(errorText(e)))
    call<Summary>('GET', '/v1/usage/summary').then(setSummary, e => setError(errorText(e)))
  }, [])
  useEffect(() => {
    const q = new URLSearchParams({ limit: '20', offset: String(offset) })
    if (kind) q.set('kind', kind)
    call<List<Entry>>('GET', `/v1/credits/ledger?${q}`).then(setLedger, e => setError(errorText(e)))
  }, [kind, offset])

  return (
    <div class="stack">
      <ErrorLine error={error} />
      <div class="tiles">
        <div class="tile"><span class="muted">Balance</span><strong data-testid="balance">{credits?.credits ?? '…'}</strong><span class="muted">credits</span></div>
        <div class="tile"><span class="muted">Tier</span><strong>{credits?.tier ?? '…'}</strong><span class="muted">{credits ? (credits.free_trial.video_used ? 'free video used' : 'free video available') : ''}</span></div>
        <div class="tile"><span class="muted">Requests (30 days)</span><strong data-testid="requests">{summary?.requests ?? '…'}</strong></div>
        <div class="tile"><span class="muted">Spent (30 days)</span><strong data-testid="spent">{summary?.net_credits ?? '…'}</strong><span class="muted">{summary ? `${summary.credits_charged} charged, ${summary.credits_refunded} refunded` : ''}</span></div>
      </div>
      <Card title={`Usage ${summary ? `${summary.from} to ${summary.to}` : ''}`}>
        {summary ? <UsageChart daily={summary.daily} /> : <p class="muted">Loading…</p>}
        {summary && <div class="two"><Bars title="Jobs by status" values={summary.jobs_by_status} /><Bars title="Jobs by model" values={summary.jobs_by_model} /></div>}
      </Card>
      <Card title="Credit ledger" actions={
        <select aria-label="Entry kind" value={kind} onChange={(e) => { setKind((e.target as HTMLSelectElement).value); setOffset(0) }}>
          <option value="">all entries</option>
          {['charge', 'refund', 'purchase', 'grant', 'adjustment'].map(k => <option value={k}>{k}</option>)}
        </select>
      }>
        <table data-testid="ledger">
          <thead><tr><th>When</th><th>Kind</th><th class="num">Credits</th><th>Job</th><th>Note</th></tr></thead>
          <tbody>
            {ledger?.data.map(e => (
              <tr>
                <td>{fmtDate(e.created_at)}</td>
                <td><span class={`pill ${e.kind}`}>{e.kind}</span></td>
                <td class={`num ${e.delta < 0 ? 'neg' : 'pos'}`}>{e.delta > 0 ? `+${e.delta}` : e.delta}</td>
                <td class="mono">{e.job_id ? <a href={`#/jobs`}>{e.job_id}</a> : '-'}</td>
                <td>{e.note ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {ledger && ledger.total === 0 && <p class="muted">No entries.</p>}
        {ledger && <Pager total={ledger.total} limit={ledger.limit} offset={ledger.offset} onPage={setOffset} />}
      </Card>
    </div>
  )
}
