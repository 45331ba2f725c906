// The image metadata reader's budgets (src/moderation.ts) and the screen's thread (src/media/screen.ts).
import t from 'tap'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pngTextBomb } from '../../bench/lib/hostile.js'
import { imageMetadataText, METADATA_TEXT_BUDGET, MetadataBudgetExceeded } from '../../src/moderation.js'
import { ImageScreen } from '../../src/media/screen.js'
import { png } from '../fixtures/media.js'

const MB = 1024 * 1024

t.test('one text budget for the whole image: many small bombs together exceed it', async (t) => {
  // Each chunk alone is well under the budget; together they are 3 GB of text.
  const e = (() => { try { imageMetadataText(pngTextBomb(3000, MB), 'png'); return null } catch (x) { return x } })()
  t.ok(e instanceof MetadataBudgetExceeded)
  t.equal((e as MetadataBudgetExceeded).budget, 'bytes')
  // Just under the budget in all: read in full.
  const fits = Math.floor(METADATA_TEXT_BUDGET / (256 * 1024)) - 1
  t.ok(imageMetadataText(pngTextBomb(fits, 256 * 1024), 'png').length >= fits * 256 * 1024)
})

t.test('the time budget ends a long read', async (t) => {
  const e = (() => { try { imageMetadataText(pngTextBomb(20, 64 * 1024), 'png', -1); return null } catch (x) { return x } })()
  t.equal((e as MetadataBudgetExceeded | null)?.budget, 'time')
})

t.test('the screen thread: a term in the metadata, a clean image, a bomb, all off this thread', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'gjt-screen-'))
  const screen = new ImageScreen()
  t.teardown(async () => { await screen.close(); await rm(dir, { recursive: true, force: true }) })
  const put = async (name: string, b: Buffer) => { const p = join(dir, name); await writeFile(p, b); return p }
  const terms: string[] = ['extra banned words']
  t.same(await screen.screen({ path: await put('a.png', png({ text: { Title: 'holiday' } })), format: 'png', filename: 'a.png', terms }), { ok: true, term: null })
  t.same(await screen.screen({ path: await put('b.png', png({ text: { Title: 'some extra banned words here' } })), format: 'png', filename: 'b.png', terms }), { ok: true, term: 'extra banned words' })
  t.same(await screen.screen({ path: await put('c.png', png()), format: 'png', filename: 'forbidden-test-term.png', terms }), { ok: true, term: 'forbidden-test-term' }, 'the file name is screened too')
  t.same(await screen.screen({ path: await put('d.png', pngTextBomb(3000, MB)), format: 'png', filename: 'd.png', terms }), { ok: false, budget: 'bytes' })
})

t.test('a task past the screen\'s own timeout reads as over the time budget', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'gjt-screen-'))
  const screen = new ImageScreen(1)
  t.teardown(async () => { await screen.close(); await rm(dir, { recursive: true, force: true }) })
  const p = join(dir, 'big.png')
  await writeFile(p, pngTextBomb(1000, 1024))
  t.same(await screen.screen({ path: p, format: 'png', filename: 'big.png', terms: [] }), { ok: false, budget: 'time' })
})
