import { useState } from 'preact/hooks'
import type { ComponentChildren } from 'preact'

export function ErrorLine ({ error }: { error: string | null }) {
  return error ? <p class="error" role="alert">{error}</p> : null
}

/** A secret shown once, with a copy button. */
export function SecretOnce ({ label, value, onDone }: { label: string; value: string; onDone: () => void }) {
  const [copied, setCopied] = useState(false)
  const copy = async () => {
    try { await navigator.clipboard.writeText(value); setCopied(true) } catch {
      const el = document.getElementById('secret-value') as HTMLInputElement | null
      el?.select(); document.execCommand?.('copy'); setCopied(true)
    }
  }
  return (
    <div class="secret" data-testid="secret">
      <strong>{label}</strong> <span class="muted">shown once: copy it now, it cannot be shown again.</span>
      <div class="row">
        <input id="secret-value" class="mono grow" readOnly value={value} onFocus={(e) => (e.target as HTMLInputElement).select()} />
        <button type="button" onClick={copy}>{copied ? 'Copied' : 'Copy'}</button>
        <button type="button" class="secondary" onClick={onDone}>Done</button>
      </div>
    </div>
  )
}

export function Card ({ title, children, actions }: { title: string; children: ComponentChildren; actions?: ComponentChildren }) {
  return (
    <section class="card">
      <header><h2>{title}</h2>{actions}</header>
      {children}
    </section>
  )
}

export function Pager ({ total, limit, offset, onPage }: { total: number; limit: number; offset: number; onPage: (offset: number) => void }) {
  if (total <= limit) return null
  return (
    <div class="pager">
      <button type="button" class="secondary" disabled={offset === 0} onClick={() => onPage(Math.max(0, offset - limit))}>Newer</button>
      <span class="muted">{offset + 1}-{Math.min(total, offset + limit)} of {total}</span>
      <button type="button" class="secondary" disabled={offset + limit >= total} onClick={() => onPage(offset + limit)}>Older</button>
    </div>
  )
}
