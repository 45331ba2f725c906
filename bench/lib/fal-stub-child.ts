/**
 * The fal contract stub (test/fixtures/fal-stub.ts) in its own process, for the provider
 * scenarios: its CPU is not the runner's (which holds the load generator and the SSE client)
 * nor the service's, and both sides of a scenario talk to the same stub. Started with
 * startFalStubProcess(); the scenario drives it over its control endpoint (`/_stub/...`).
 * The stub's per-request records are dropped every few seconds (a 100,000-job run would
 * otherwise keep every request body); `counts` and `released` are what the scenarios read.
 */
import { startFalStub } from '../../test/fixtures/fal-stub.js'

const stub = await startFalStub()
// Idle connections kept a minute, as a provider's API and media CDN keep them (Node's default is
// 5 s): the scenarios' rounds pause for longer than that between their bursts, and a provider's
// client would not reconnect for every burst.
stub.server.keepAliveTimeout = 60_000
setInterval(() => { stub.requests.length = 0; stub.callbacks.length = 0 }, 2000).unref()
process.on('message', (m: any) => {
  if (m?.cmd === 'info') process.send!({ id: m.id, url: stub.url, key: stub.key, jwksUrl: stub.jwksUrl })
})
process.on('SIGTERM', () => { void stub.close().finally(() => process.exit(0)) })
process.send!({ type: 'ready' })
