// A receiver for provider callbacks in adapter tests: records each request as the RawCallback
// the service's callback route would build (raw body bytes, lower-cased headers, the query) and,
// when given an adapter, answers as that route does (200 verified, 401 refused).
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { RawCallback, UpstreamAdapter, VerifiedCallback } from '../../src/providers/upstream.js'

export interface Sink {
  url: (path?: string) => string
  received: Array<{ raw: RawCallback; verdict: VerifiedCallback | null }>
  close: () => Promise<void>
}

export async function startSink (adapter?: UpstreamAdapter): Promise<Sink> {
  const received: Sink['received'] = []
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const headers: Record<string, string> = {}
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers[k.toLowerCase()] = v
      const u = new URL(req.url ?? '/', 'http://x')
      const raw: RawCallback = { headers, query: u.search.replace(/^\?/, ''), body: Buffer.concat(chunks) }
      const entry = { raw, verdict: null as VerifiedCallback | null }
      received.push(entry)
      if (!adapter) { res.writeHead(200).end(); return }
      void adapter.verifyCallback(raw).then(v => {
        entry.verdict = v
        res.writeHead(v.ok ? 200 : 401).end()
      })
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: (path = '/v1/providers/x/callback') => `http://127.0.0.1:${port}${path}`,
    received,
    close: () => new Promise<void>(resolve => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}
