import t from 'tap'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../../src/config.js'
import { createStorage } from '../../src/storage/index.js'
import { UploadSweeper } from '../../src/storage/sweeper.js'
import { createUser, startServer } from '../helpers/server.js'
import { multipart, png } from '../fixtures/media.js'
import { storageContract } from './contract.js'

// s3rver (devDependency) is a local S3-compatible server; loaded by name so that a machine
// without it skips this file instead of failing to compile or load.
const S3RVER = 's3rver'
let S3rver: any = null
try { S3rver = (await import(S3RVER)).default } catch (err) {
  t.comment(`s3rver could not be loaded: ${(err as Error).message}`)
}

if (!S3rver) {
  t.plan(0, 'S3 driver tests need the s3rver devDependency (npm install); skipped')
} else {
  const dir = await mkdtemp(join(tmpdir(), 'gjt-s3rver-'))
  const server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: dir, configureBuckets: [{ name: 'media' }, { name: 'pub' }] })
  const { port } = await server.run()
  t.teardown(async () => { await server.close(); await rm(dir, { recursive: true, force: true }) })
  const endpoint = `http://127.0.0.1:${port}`
  const env = {
    STORAGE_DRIVER: 's3',
    S3_BUCKET: 'media',
    S3_REGION: 'us-east-1',
    S3_ENDPOINT: endpoint,
    S3_ACCESS_KEY_ID: 'S3RVER',
    S3_SECRET_ACCESS_KEY: 'S3RVER',
  }
  const dataDir = await mkdtemp(join(tmpdir(), 'gjt-s3-data-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))

  const storage = await createStorage(loadConfig({ ...env, DATA_DIR: dataDir, PUBLIC_BASE_URL: 'https://api.example.com' }))
  t.teardown(() => storage.close?.())
  t.equal(storage.driver, 's3', 'STORAGE_DRIVER=s3 picks the S3 driver')
  storageContract(t, storage, (key) => `https://api.example.com/files/${key}`)

  t.test('with S3_PUBLIC_URL, url() points at the bucket, which serves the object', async (t) => {
    const pub = await createStorage(loadConfig({ ...env, S3_BUCKET: 'pub', S3_PUBLIC_URL: `${endpoint}/pub/`, DATA_DIR: dataDir }))
    t.teardown(() => pub.close?.())
    await pub.put('results/p.png', png(), 'image/png')
    const url = pub.url('results/p.png')
    t.equal(url, `${endpoint}/pub/results/p.png`)
    const r = await fetch(url)
    t.equal(r.status, 200)
    t.equal(r.headers.get('content-type'), 'image/png')
    t.same(Buffer.from(await r.arrayBuffer()), png())
  })

  t.test('the service on S3: an upload is stored in the bucket and served through /files', async (t) => {
    const s = await startServer(t, { ...env, TIER_LIMITS: JSON.stringify({ free: { rpm: 100000 } }) })
    const user = await createUser(s)
    const { body, contentType } = multipart([{ name: 'kind', value: 'image' }, { name: 'file', filename: 'pic.png', value: png() }])
    const up = await s.req('POST', '/v1/uploads', { key: user.key, raw: body, headers: { 'content-type': contentType } })
    t.equal(up.status, 201, up.text)
    const key = new URL(up.body.url).pathname.replace(/^\/files\//, '')
    const obj = await s.app.services.storage.head(key)
    t.ok(obj, 'the object is in the bucket')
    t.equal(obj!.contentType, 'image/png')

    const r = await fetch(`${s.url}/files/${key}`)
    t.equal(r.status, 200)
    t.equal(r.headers.get('content-type'), 'image/png')
    t.equal(r.headers.get('etag'), obj!.etag)
    t.same(Buffer.from(await r.arrayBuffer()), png())
    const part = await fetch(`${s.url}/files/${key}`, { headers: { range: 'bytes=0-7' } })
    t.equal(part.status, 206)
    t.equal(part.headers.get('content-range'), `bytes 0-7/${png().length}`)
    t.same(Buffer.from(await part.arrayBuffer()), png().subarray(0, 8))
    const cached = await fetch(`${s.url}/files/${key}`, { headers: { 'if-none-match': obj!.etag } })
    t.equal(cached.status, 304)

    // The sweeper deletes from the bucket too.
    await s.app.services.sql`UPDATE uploads SET expires_at = now() - interval '1 second' WHERE key = ${key}`
    const sweeper = new UploadSweeper(s.app.services.sql, s.app.services.storage, s.app.services.log)
    t.equal(await sweeper.sweep(), 1)
    t.equal(await s.app.services.storage.head(key), null)
    t.equal((await fetch(`${s.url}/files/${key}`)).status, 404)
  })
}
