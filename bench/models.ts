/**
 * `models`: GET /v1/models (public, cacheable; the body is serialised once). Target: service
 * CPU per request <= 1.3x bare uWebSockets.js answering the same bytes. Fastify 5 hello-world
 * is shown for scale.
 */
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startBaseline } from './lib/children.js'
import { measureRead } from './lib/load.js'
import { rateNote, type Scenario } from './lib/scenario.js'
import { bootStack } from './lib/stack.js'

export const scenario: Scenario = {
  name: 'models',
  title: 'GET /v1/models',
  async prepare (o) {
    const stack = await bootStack(o, 'models', {})
    const r = await fetch(`${stack.svc.url}/v1/models`)
    const body = Buffer.from(await r.arrayBuffer())
    const dir = mkdtempSync(join(tmpdir(), 'bench-models-'))
    writeFileSync(join(dir, 'models.json'), body)
    const uws = await startBaseline('bare uWS', 'baselines/uws-static.js', { BODY_FILE: join(dir, 'models.json'), CONTENT_TYPE: r.headers.get('content-type') ?? 'application/json' })
    const fastify = await startBaseline('Fastify hello', 'baselines/fastify-hello.js')
    const run = async (pid: number, url: string, seconds: number) =>
      ({ ...await measureRead(pid, { url, connections: o.connections, rate: o.rate, duration: seconds }, o.paced), body_bytes: body.length })
    const side = (name: string, role: 'service' | 'baseline', pid: number, url: string) => ({
      name,
      role,
      warmup: async () => { await run(pid, url, 2) },
      measure: () => run(pid, url, o.duration),
    })
    return {
      sides: [
        side('service', 'service', stack.svc.pid, `${stack.svc.url}/v1/models`),
        side(uws.name, 'baseline', uws.pid, `http://127.0.0.1:${uws.port}/v1/models`),
        side(fastify.name, 'baseline', fastify.pid, `http://127.0.0.1:${fastify.port}/`),
      ],
      targets: [{ metric: 'cpu_us_per_req', kind: 'ratio', baseline: uws.name, op: '<=', value: 1.3 }],
      show: ['rps', 'p50_ms', 'p99_ms', 'cpu_us_per_req', 'main_thread_cpu_us_per_req', ...(o.paced > 0 ? ['late', 'client_cpu_us_per_req'] : []), 'errors', 'non2xx'],
      notes: [`body ${body.length} bytes${rateNote(o)}; the service also writes X-Request-Id, CORS, ETag, Vary and Cache-Control headers and meters every request (a public route: no key, no rate window)`],
      close: async () => { await uws.stop(); await fastify.stop(); await stack.close(); rmSync(dir, { recursive: true, force: true }) },
    }
  },
}
