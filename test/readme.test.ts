// The README's walk-through, run literally (its own shell blocks, with the base URL pointed at a
// test server on the default free tier: 10 requests per minute), never meets a 429 and ends with
// the first video completed. docs/api.md continues it (audio, batch, uploads, usage): its blocks
// run after the README's, with the balances they state.
import t from 'tap'
import { spawn } from 'node:child_process'
import { mkdir, mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startServer } from './helpers/server.js'

const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8')
const apiDoc = await readFile(new URL('../../docs/api.md', import.meta.url), 'utf8')

/** The first ```sh block after `marker` in `doc` (the README unless given). */
function blockAfter (marker: string, doc = readme): string {
  const at = doc.indexOf(marker)
  if (at < 0) throw new Error(`${doc === readme ? 'README' : 'docs/api.md'} has no ${JSON.stringify(marker)}`)
  const m = /```sh\n([\s\S]*?)```/.exec(doc.slice(at))
  if (!m) throw new Error(`no sh block after ${marker}`)
  return m[1]
}

// One front end: the requests are counted through the main thread's metering hook.
const s = await startServer(t, { SIM_SPEED: '20', FRONTENDS: '1' })
const statuses: number[] = []
const metering = s.app.services.metering
const push = metering.push.bind(metering)
metering.push = (atMs, account, key, ep, method, url, status, ...rest) => {
  if (!Number.isNaN(account)) statuses.push(status)
  return push(atMs, account, key, ep, method, url, status, ...rest)
}

t.test('the walk-through and the first video, as written, stay within the free tier', { timeout: 120_000 }, async (t) => {
  const cwd = await mkdtemp(join(tmpdir(), 'gjt-readme-'))
  t.teardown(() => rm(cwd, { recursive: true, force: true }))
  await mkdir(join(cwd, 'data'))
  await writeFile(join(cwd, 'data', 'admin-token'), s.app.adminToken + '\n')
  const script = [blockAfter('a first walk-through'), blockAfter('## Your first video')].join('\n')
  t.match(script, /sse\/jobs/, 'the first video is followed with SSE')
  const run = script.replaceAll('http://localhost:8080', s.url)
  // stderr to a file, as a terminal would take it (the README tees to /dev/stderr, which a socket pipe cannot open).
  const errFile = join(cwd, 'stderr.txt')
  const errFd = await open(errFile, 'w')
  const out = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn('bash', ['-e', '-c', run], { cwd, stdio: ['ignore', 'pipe', errFd.fd] })
    let stdout = ''
    child.stdout!.on('data', (d) => { stdout += d })
    child.on('exit', async (code) => { await errFd.close(); resolve({ code, stdout, stderr: await readFile(errFile, 'utf8') }) })
  })
  t.equal(out.code, 0, `the script ran (stderr: ${out.stderr.slice(0, 500)})`)
  t.match(out.stdout, /event: done/, 'the stream ended with done')
  t.match(out.stdout, /"status":"completed"/, 'the job completed')
  t.notMatch(out.stdout + out.stderr, /RATE_LIMIT_EXCEEDED|"code":"[a-z_]*limit/i, 'no limit error in the output')
  t.ok(statuses.length >= 5, `${statuses.length} requests on the account`)
  t.notOk(statuses.includes(429), `no 429 among ${JSON.stringify(statuses)}`)
  t.equal(s.config.tierLimits.free.rpm, 10, 'the default free tier (10 requests per minute)')
})

/** `"name":number` pairs the README's answer comments (`# 201 {...}`) state in a block. */
function statedNumbers (block: string, names: string[]): string[] {
  const out: string[] = []
  for (const line of block.split('\n')) {
    if (!line.startsWith('#')) continue
    for (const m of line.matchAll(/"([a-z_]+)":(\d+)/g)) if (names.includes(m[1])) out.push(`"${m[1]}":${m[2]}`)
  }
  return out
}

t.test('docs/api.md\'s audio, batch (after the purchase), uploads and usage run as written after the walk-through, with the balances it states', { timeout: 120_000 }, async (t) => {
  const fresh = await startServer(t, { SIM_SPEED: '20', FRONTENDS: '1' })
  const cwd = await mkdtemp(join(tmpdir(), 'gjt-readme-'))
  t.teardown(() => rm(cwd, { recursive: true, force: true }))
  await mkdir(join(cwd, 'data'))
  await mkdir(join(cwd, 'assets', 'sim'), { recursive: true })
  await writeFile(join(cwd, 'assets', 'sim', 'sample.png'), await readFile(new URL('../../assets/sim/sample.png', import.meta.url)))
  await writeFile(join(cwd, 'data', 'admin-token'), fresh.app.adminToken + '\n')
  const later = ['\n## Audio\n', '\n## Batch (paid plans)\n', '\n## Uploads\n', '\n## Usage and limits\n'].map((h) => blockAfter(h, apiDoc))
  const script = [blockAfter('a first walk-through'), blockAfter('## Your first video'), ...later].join('\n')
  const errFile = join(cwd, 'stderr.txt')
  const errFd = await open(errFile, 'w')
  const out = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn('bash', ['-e', '-c', script.replaceAll('http://localhost:8080', fresh.url)], { cwd, stdio: ['ignore', 'pipe', errFd.fd] })
    let stdout = ''
    child.stdout!.on('data', (d) => { stdout += d })
    child.on('exit', async (code) => { await errFd.close(); resolve({ code, stdout, stderr: await readFile(errFile, 'utf8') }) })
  })
  t.equal(out.code, 0, `the script ran (stderr: ${out.stderr.slice(0, 500)})`)
  t.notMatch(out.stdout, /"error":true,"code":"(?!UNSUPPORTED_OPTION)/, 'no error answer but the batch item docs/api.md shows refused')
  for (const n of statedNumbers(later.join('\n'), ['credits_charged', 'remaining_credits', 'estimated_credits', 'size', 'total'])) {
    t.ok(out.stdout.includes(n), `docs/api.md's ${n} is what the service answered`)
  }
  t.match(out.stdout, /"code":"UNSUPPORTED_OPTION"[^}]*"param":"resolution"/, 'the batch item docs/api.md shows refused is refused')
  t.match(out.stdout, /"kind":"voice","name":"Warm narrator"/, 'the voice asset docs/api.md lists exists once the operator created it')
})
