import { createServer } from 'node:net'

/** A TCP port free on 127.0.0.1 now (a server that needs a fixed port, or a stub's address). */
export async function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer()
    srv.once('error', reject)
    srv.listen(0, '127.0.0.1', () => { const p = (srv.address() as { port: number }).port; srv.close(() => resolve(p)) })
  })
}
