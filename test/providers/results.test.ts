// Provider results into our storage (docs/providers.md "Routing", Results): the download follows the webhook
// address rules, checks the kind by magic bytes, caps the size and follows a few redirects.
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { storeResult, type ResultRules } from '../../src/providers/results.js'
import { LocalStorage } from '../../src/storage/local.js'

const png = await readFile(new URL('../../../assets/sim/sample.png', import.meta.url))
const mp4 = await readFile(new URL('../../../assets/sim/sample.mp4', import.meta.url))
const server = createServer((req, res) => {
  switch (req.url) {
    case '/a.png': res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(png); return
    case '/v.mp4': res.writeHead(200, { 'content-type': 'video/mp4' }).end(mp4); return
    case '/page.html': res.writeHead(200, { 'content-type': 'text/html' }).end('<html><body>not media</body></html>'); return
    case '/moved': res.writeHead(302, { location: '/v.mp4' }).end(); return
    case '/gone': res.writeHead(404).end(); return
    case '/big': res.writeHead(200, { 'content-type': 'video/mp4' }); res.write(mp4); res.end(Buffer.alloc(200_000)); return
    // A body that never ends: a chunk every 20 ms, with a declared length (read whole) or chunked (streamed).
    case '/huge': res.writeHead(200, { 'content-type': 'video/mp4', 'content-length': '5000000' }); res.write(mp4); return
    case '/drip-declared': drip(res.writeHead(200, { 'content-type': 'image/png', 'content-length': String(png.length + 500_000) })); return
    case '/drip-chunked': drip(res.writeHead(200, { 'content-type': 'video/mp4' })); return
  }
  res.writeHead(404).end()
})
function drip (res: import('node:http').ServerResponse): void {
  res.write(png.subarray(0, 100))
  const timer = setInterval(() => res.write(Buffer.alloc(10)), 20)
  res.on('close', () => clearInterval(timer))
}
await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
const host = `127.0.0.1:${(server.address() as AddressInfo).port}`
const dir = await mkdtemp(join(tmpdir(), 'gjt-results-'))
const storage = new LocalStorage(dir, 'http://svc.test')
t.teardown(async () => { server.close(); await rm(dir, { recursive: true, force: true }) })

const rules = (o: Partial<ResultRules> = {}): ResultRules => ({ allowlist: [host], maxBytes: 1_000_000, timeoutMs: 5000, attempts: 2, ...o })

t.test('a result is stored under results/ with the type its bytes show, whatever the header says', async (t) => {
  const r = await storeResult(storage, 'job_1', 'image', `http://${host}/a.png`, rules())
  t.match(r, { url: 'http://svc.test/files/results/job_1.png', contentType: 'image/png', size: png.length })
  t.same(Buffer.concat(await (await storage.read('results/job_1.png')).toArray()), png, 'same bytes')
  const v = await storeResult(storage, 'job_2', 'video', `http://${host}/moved`, rules())
  t.equal(v.contentType, 'video/mp4', 'a redirect is followed')
})

t.test('a private address is refused unless allowlisted (the webhook rules); plain http likewise', async (t) => {
  await t.rejects(storeResult(storage, 'job_3', 'image', `http://${host}/a.png`, rules({ allowlist: [], attempts: 1 })), /https|refused/i)
  await t.rejects(storeResult(storage, 'job_3', 'image', 'https://127.0.0.1:1/a.png', rules({ allowlist: [], attempts: 1 })), /refused/i, 'https to a loopback literal')
  await t.rejects(storeResult(storage, 'job_3', 'image', 'https://169.254.169.254/latest/meta-data', rules({ allowlist: [], attempts: 1 })), /refused/i, 'the metadata address')
})

t.test('wrong kind, oversize, missing file and odd schemes are refused', async (t) => {
  await t.rejects(storeResult(storage, 'job_4', 'video', `http://${host}/page.html`, rules()), { name: 'ResultRejected' }, 'HTML is not a video')
  await t.rejects(storeResult(storage, 'job_4', 'video', `http://${host}/a.png`, rules()), { name: 'ResultRejected' }, 'a PNG is not a video')
  await t.rejects(storeResult(storage, 'job_5', 'video', `http://${host}/big`, rules({ maxBytes: 100_000 })), { name: 'ResultRejected' }, 'over the cap while streaming')
  t.equal(await storage.head('results/job_5.mp4'), null, 'nothing partial left behind')
  await t.rejects(storeResult(storage, 'job_5', 'video', `http://${host}/huge`, rules({ maxBytes: 100_000 })), { name: 'ResultRejected', message: /5000000 bytes, over/ }, 'declared over the cap: refused before reading')
  await t.rejects(storeResult(storage, 'job_6', 'video', `http://${host}/gone`, rules()), /404/)
  await t.rejects(storeResult(storage, 'job_6', 'video', 'file:///etc/passwd', rules()), { name: 'ResultRejected' })
})

t.test('a body that keeps trickling is cut at the whole-download deadline, read whole or streamed, and nothing is stored', async (t) => {
  await t.rejects(storeResult(storage, 'job_7', 'image', `http://${host}/drip-declared`, rules({ timeoutMs: 200, attempts: 1 })), { name: 'ResultTimeout' })
  await t.rejects(storeResult(storage, 'job_8', 'image', `http://${host}/drip-chunked`, rules({ timeoutMs: 200, attempts: 1 })), { name: 'ResultTimeout' })
  t.equal(await storage.head('results/job_7.png'), null)
  t.equal(await storage.head('results/job_8.png'), null)
})
