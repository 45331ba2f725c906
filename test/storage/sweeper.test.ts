import t from 'tap'
import { pino } from 'pino'
import { UploadSweeper } from '../../src/storage/sweeper.js'
import { createUser, startServer } from '../helpers/server.js'
import { mp4, multipart, png } from '../fixtures/media.js'
import { settled } from '../helpers/wait.js'

const s = await startServer(t, { TIER_LIMITS: JSON.stringify({ free: { rpm: 100000 } }) })
const user = await createUser(s)
const { sql, storage } = s.app.services
const log = pino({ level: 'silent' })

async function upload (kind: string, filename: string, data: Buffer): Promise<string> {
  const { body, contentType } = multipart([{ name: 'kind', value: kind }, { name: 'file', filename, value: data }])
  const r = await s.req('POST', '/v1/uploads', { key: user.key, raw: body, headers: { 'content-type': contentType } })
  if (r.status !== 201) throw new Error(`upload: ${r.status} ${r.text}`)
  return new URL(r.body.url).pathname.replace(/^\/files\//, '')
}

t.test('expired video uploads lose their file and their row; others stay', async (t) => {
  const expired = await upload('video', 'old.mp4', mp4())
  const fresh = await upload('video', 'new.mp4', mp4())
  const image = await upload('image', 'keep.png', png())
  await sql`UPDATE uploads SET expires_at = now() - interval '1 day' WHERE key = ${expired}`

  const sweeper = new UploadSweeper(sql, storage, log)
  t.equal(await sweeper.sweep(), 1, 'one upload deleted')
  t.equal(await storage.head(expired), null, 'expired file gone')
  t.equal((await sql`SELECT 1 FROM uploads WHERE key = ${expired}`).length, 0, 'expired row gone')
  t.equal((await fetch(`${s.url}/files/${expired}`)).status, 404, '/files answers 404 for it')
  t.ok(await storage.head(fresh), 'an unexpired video stays')
  t.ok(await storage.head(image), 'a durable image stays')
  t.equal((await sql`SELECT 1 FROM uploads WHERE key IN (${fresh}, ${image})`).length, 2)
  t.equal(await sweeper.sweep(), 0, 'nothing left to sweep')
})

t.test('a sweep at a later time removes what has expired by then, in batches', async (t) => {
  const keys = await Promise.all([1, 2, 3, 4, 5].map(i => upload('video', `v${i}.mp4`, mp4())))
  const sweeper = new UploadSweeper(sql, storage, log, { batch: 2 })
  t.equal(await sweeper.sweep(new Date(Date.now() + 91 * 86400e3)) >= 5, true, 'all videos older than 90 days at that time')
  for (const k of keys) t.equal(await storage.head(k), null)
  const [{ n }] = await sql<Array<{ n: number }>>`SELECT count(*)::int AS n FROM uploads WHERE kind = 'video'`
  t.equal(n, 0)
  const [{ m }] = await sql<Array<{ m: number }>>`SELECT count(*)::int AS m FROM uploads WHERE kind = 'image'`
  t.ok(m >= 1, 'images are durable')
})

t.test('a row whose file is already gone is still cleared (crash between file and row)', async (t) => {
  const key = await upload('video', 'half.mp4', mp4())
  await storage.delete(key)
  await sql`UPDATE uploads SET expires_at = now() - interval '1 minute' WHERE key = ${key}`
  t.equal(await new UploadSweeper(sql, storage, log).sweep(), 1)
  t.equal((await sql`SELECT 1 FROM uploads WHERE key = ${key}`).length, 0)
})

t.test('a file that cannot be deleted keeps its row for the next sweep', async (t) => {
  const key = await upload('video', 'stuck.mp4', mp4())
  await sql`UPDATE uploads SET expires_at = now() - interval '1 minute' WHERE key = ${key}`
  const failing = { ...storage, driver: storage.driver, delete: async () => { throw new Error('disk says no') } } as typeof storage
  t.equal(await new UploadSweeper(sql, failing, log).sweep(), 0)
  t.equal((await sql`SELECT 1 FROM uploads WHERE key = ${key}`).length, 1, 'row kept')
  t.equal(await new UploadSweeper(sql, storage, log).sweep(), 1, 'the next sweep finishes it')
})

t.test('start() sweeps at once on an unref\'d timer and stop() waits for it', async (t) => {
  const key = await upload('video', 'boot.mp4', mp4())
  await sql`UPDATE uploads SET expires_at = now() - interval '1 minute' WHERE key = ${key}`
  const sweeper = new UploadSweeper(sql, storage, log, { intervalMs: 60_000 })
  sweeper.start()
  t.equal((await settled(() => sql`SELECT 1 FROM uploads WHERE key = ${key}`, rows => rows.length === 0, { timeoutMs: 2000, everyMs: 20 })).length, 0, 'swept at start')
  await sweeper.stop()
  t.equal(await sweeper.sweep(), 0, 'a stopped sweeper does nothing')
})
