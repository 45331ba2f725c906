import t from 'tap'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../../src/config.js'
import { createStorage, storageConfig } from '../../src/storage/index.js'
import { LocalStorage } from '../../src/storage/local.js'
import { storageContract } from './contract.js'

const dataDir = await mkdtemp(join(tmpdir(), 'gjt-local-'))
t.teardown(() => rm(dataDir, { recursive: true, force: true }))

const config = loadConfig({ DATA_DIR: dataDir, PUBLIC_BASE_URL: 'https://api.example.com/' })
const storage = await createStorage(config)

t.test('STORAGE_DRIVER unset picks the local driver under DATA_DIR/media', async (t) => {
  t.equal(storage.driver, 'local')
  t.ok(storage instanceof LocalStorage)
  t.equal(config.storageDriver, 'local')
})

storageContract(t, storage, (key) => `https://api.example.com/files/${key}`)

t.test('objects live under DATA_DIR/media with a .meta beside each, and no temp files remain', async (t) => {
  await storage.put('results/x/file.png', Buffer.from('png'), 'image/png')
  const names = await readdir(join(dataDir, 'media', 'results', 'x'))
  t.same(names.sort(), ['file.png', 'file.png.meta'])
  const uploads = await readdir(join(dataDir, 'media', 'uploads', '2026', '01'))
  t.notOk(uploads.some(n => n.includes('.tmp-')), 'failed puts left no temp file')
})

t.test('head never exposes .meta files', async (t) => {
  t.equal(await storage.head('results/x/file.png.meta'), null)
})

t.test('storageConfig is a plain, cloneable copy for worker threads', async (t) => {
  const sc = storageConfig(config)
  const cloned = structuredClone(sc)
  t.same(cloned, { dataDir, publicBaseUrl: 'https://api.example.com', storageDriver: 'local', s3: config.s3 })
  const again = await createStorage(cloned)
  t.equal(again.url('a.png'), storage.url('a.png'))
})

t.test('STORAGE_DRIVER must be local or s3, and s3 needs a bucket', async (t) => {
  t.throws(() => loadConfig({ STORAGE_DRIVER: 'ftp' }), /STORAGE_DRIVER/)
  t.throws(() => loadConfig({ STORAGE_DRIVER: 's3' }), /S3_BUCKET/)
  const c = loadConfig({ STORAGE_DRIVER: 's3', S3_BUCKET: 'b', S3_ENDPOINT: 'http://127.0.0.1:9000/', S3_PUBLIC_URL: 'https://cdn.example.com/media/' })
  t.equal(c.s3.endpoint, 'http://127.0.0.1:9000')
  t.equal(c.s3.publicUrl, 'https://cdn.example.com/media')
  t.equal(c.s3.forcePathStyle, true, 'path style with a custom endpoint')
  t.equal(c.s3.region, 'us-east-1')
  t.equal(loadConfig({ STORAGE_DRIVER: 's3', S3_BUCKET: 'b' }).s3.forcePathStyle, false, 'virtual-hosted style on AWS')
})
