/** A minimal SSE reader over fetch for tests: collects parsed events until the stream ends. */
export interface SseEvent { id?: string; event: string; data: string }

export interface SseStream {
  status: number
  headers: Headers
  events: SseEvent[]
  /** Resolves when the server closes the stream. */
  closed: Promise<void>
  /** Resolves once an event matching `pred` arrived. */
  waitFor: (pred: (e: SseEvent) => boolean, timeoutMs?: number) => Promise<SseEvent>
  abort: () => void
  body: string
}

export async function openSse (url: string, headers: Record<string, string> = {}): Promise<SseStream> {
  const ctl = new AbortController()
  const res = await fetch(url, { headers, signal: ctl.signal })
  const events: SseEvent[] = []
  const waiters: Array<{ pred: (e: SseEvent) => boolean; resolve: (e: SseEvent) => void }> = []
  const out: SseStream = {
    status: res.status,
    headers: res.headers,
    events,
    closed: Promise.resolve(),
    body: '',
    abort: () => ctl.abort(),
    waitFor (pred, timeoutMs = 10_000) {
      const hit = events.find(pred)
      if (hit) return Promise.resolve(hit)
      return new Promise((resolve, reject) => {
        const w = { pred, resolve: (e: SseEvent) => { clearTimeout(timer); resolve(e) } }
        const timer = setTimeout(() => { waiters.splice(waiters.indexOf(w), 1); reject(new Error(`SSE event not seen in ${timeoutMs} ms; got ${JSON.stringify(events)}`)) }, timeoutMs)
        waiters.push(w)
      })
    },
  }
  if (res.status !== 200 || !res.body) { out.body = await res.text(); return out }
  out.closed = (async () => {
    const dec = new TextDecoder()
    let buf = ''
    try {
      for await (const chunk of res.body as any) {
        buf += dec.decode(chunk, { stream: true })
        let i
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i)
          buf = buf.slice(i + 2)
          const e: SseEvent = { event: 'message', data: '' }
          let hasData = false
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) continue
            const c = line.indexOf(':')
            const k = c < 0 ? line : line.slice(0, c)
            const v = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '')
            if (k === 'id') e.id = v
            else if (k === 'event') e.event = v
            else if (k === 'data') { e.data += (hasData ? '\n' : '') + v; hasData = true }
          }
          if (!hasData) continue
          events.push(e)
          for (const w of [...waiters]) if (w.pred(e)) { waiters.splice(waiters.indexOf(w), 1); w.resolve(e) }
        }
      }
    } catch (err) {
      if ((err as Error).name !== 'AbortError') throw err
    }
  })()
  return out
}
