import t from 'tap'
import { spawnSync } from 'node:child_process'
import { mkdtemp, readdir, readFile, rm, writeFile, mkdir } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { FileWriter } from '../../src/storage/file-writer.js'
import { LocalStorage, WRITER_MAX } from '../../src/storage/local.js'
import { MAGIC } from '../../src/storage/object-header.js'

const dir = await mkdtemp(join(tmpdir(), 'gjt-writer-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))

t.test('a put writes the bytes under the final name, makes a missing directory, and moves the buffer', async (t) => {
  const w = new FileWriter()
  t.teardown(() => w.close())
  const bytes = new Uint8Array(Buffer.from('hello writer'))
  const p = join(dir, 'a', 'b', 'obj.bin')
  await w.put(`${p}.tmp-1-0`, p, bytes)
  t.equal(await readFile(p, 'utf8'), 'hello writer')
  t.same(await readdir(join(dir, 'a', 'b')), ['obj.bin'], 'no temp file remains')
  t.equal(bytes.byteLength, 0, 'the buffer was moved to the writer, not copied')
})

t.test('a failed write is an error of the put, leaves no temp file, and the next put works', async (t) => {
  const w = new FileWriter()
  t.teardown(() => w.close())
  const d = join(dir, 'fail')
  await mkdir(join(d, 'taken'), { recursive: true })
  await writeFile(join(d, 'taken', 'x'), 'x')
  // The final name is a non-empty directory: the rename fails after the temp file was written.
  await t.rejects(w.put(join(d, 'obj.tmp-1-0'), join(d, 'taken'), new Uint8Array(Buffer.from('data'))), { code: 'INTERNAL_ERROR', message: /storage write failed/ })
  t.same((await readdir(d)).sort(), ['taken'], 'the temp file was removed')
  await w.put(join(d, 'ok.tmp-1-1'), join(d, 'ok'), new Uint8Array(Buffer.from('fine')))
  t.equal(await readFile(join(d, 'ok'), 'utf8'), 'fine')
})

t.test('many puts at once cross in batches and all land', async (t) => {
  const w = new FileWriter()
  t.teardown(() => w.close())
  const d = join(dir, 'many')
  await Promise.all(Array.from({ length: 200 }, (_, i) => w.put(join(d, `o${i}.tmp-1-${i}`), join(d, `o${i}`), new Uint8Array(Buffer.from(`n${i}`)))))
  const names = await readdir(d)
  t.equal(names.length, 200)
  t.notOk(names.some(n => n.includes('.tmp-')))
  t.equal(await readFile(join(d, 'o123'), 'utf8'), 'n123')
})

t.test('a writer that crashed fails what was pending on it and is started again', async (t) => {
  const w = new FileWriter()
  t.teardown(() => w.close())
  const d = join(dir, 'crash')
  await w.put(join(d, 'a.tmp-1-0'), join(d, 'a'), new Uint8Array(Buffer.from('a')))
  const inner = (w as unknown as { w: { crash (): Promise<void> } }).w
  await inner.crash()
  await t.resolves(w.put(join(d, 'b.tmp-1-1'), join(d, 'b'), new Uint8Array(Buffer.from('b'))), 'the restarted writer takes the next put')
  t.equal(await readFile(join(d, 'b'), 'utf8'), 'b')
})

t.test('LocalStorage writes a small buffer through the writer and a large one through the thread pool, both with the header', async (t) => {
  const s = new LocalStorage(join(dir, 'media'), 'https://x.example.com')
  t.teardown(() => s.close())
  const small = await s.put('results/s.bin', Buffer.from('small'), 'application/octet-stream')
  const big = Buffer.alloc(WRITER_MAX + 1, 7)
  const large = await s.put('results/l.bin', big, 'application/octet-stream')
  for (const [name, size] of [['s.bin', 5], ['l.bin', big.length]] as const) {
    const raw = await readFile(join(dir, 'media', 'results', name))
    t.ok(raw.subarray(0, MAGIC.length).equals(MAGIC), `${name} starts with the header`)
    t.equal((await s.head(`results/${name}`))!.size, size)
  }
  t.equal(small.size, 5)
  t.equal(large.size, big.length)
  const caller = Buffer.from('kept')
  await s.put('results/k.bin', caller, 'text/plain')
  t.equal(caller.toString(), 'kept', "the caller's buffer is left as it was (a copy is moved)")
  t.same((await readdir(join(dir, 'media', 'results'))).sort(), ['k.bin', 'l.bin', 's.bin'])
})

t.test('an idle writer does not keep the process alive', async (t) => {
  const local = fileURLToPath(new URL('../../src/storage/local.js', import.meta.url))
  const target = join(dir, 'exit')
  const script = `import { LocalStorage } from ${JSON.stringify(local)}
const s = new LocalStorage(${JSON.stringify(target)}, 'https://x')
await s.put('results/a.bin', Buffer.from('a'), 'text/plain')
console.log('stored')`
  // From a file: a worker started under `node -e` would inherit the -e flag.
  const file = join(dir, 'exit.mjs')
  await writeFile(file, script)
  const r = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 20_000 })
  t.equal(r.status, 0, `exited by itself (${r.stderr.slice(0, 300)})`)
  t.match(r.stdout, /stored/, 'after the pending write was done')
})
