// sql/0015_embed_tokens.sql on a database that already has library videos: each gets its own
// random token and its embed_url names the token (the old /embed/{video id} address is gone).
import t from 'tap'
import { copyFile, mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import postgres from 'postgres'
import { migrate } from '../../src/db/migrate.js'
import { freshDatabase } from '../helpers/db.js'

const SQL_DIR = fileURLToPath(new URL('../../../sql/', import.meta.url))

t.test('existing videos get distinct 32-byte base64url tokens and embed URLs that name them', async (t) => {
  const url = await freshDatabase(t)
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  t.teardown(() => sql.end({ timeout: 1 }))
  // The schema as it was before the tokens: every migration up to 0014.
  const before = await mkdtemp(join(tmpdir(), 'gjt-sql-'))
  t.teardown(() => rm(before, { recursive: true, force: true }))
  for (const f of await readdir(SQL_DIR)) if (/^\d{4}_/.test(f) && f < '0015') await copyFile(join(SQL_DIR, f), join(before, f))
  await migrate(sql as any, before)
  const [acct] = await sql`INSERT INTO accounts (email, password_hash) VALUES ('old@example.com', 'x') RETURNING id`
  const ids: number[] = []
  for (let i = 0; i < 3; i++) {
    const [v] = await sql`INSERT INTO videos (account_id, video_url) VALUES (${acct.id}, 'http://h/files/v.mp4') RETURNING id`
    ids.push(Number(v.id))
    await sql`UPDATE videos SET embed_url = ${`http://h/embed/${v.id}`} WHERE id = ${v.id}`
  }
  await sql`INSERT INTO videos (account_id, video_url) VALUES (${acct.id}, 'http://h/files/w.mp4')` // no media yet
  const applied = await migrate(sql as any, SQL_DIR)
  t.ok(applied.includes('0015_embed_tokens.sql'), `applied ${applied.join(', ')}`)
  const rows = await sql<Array<{ id: string; embed_token: string; embed_url: string | null }>>`SELECT id, embed_token, embed_url FROM videos ORDER BY id`
  const tokens = rows.map(r => r.embed_token)
  for (const tok of tokens) t.match(tok, /^[A-Za-z0-9_-]{43}$/, 'base64url of 32 bytes')
  t.equal(new Set(tokens).size, tokens.length, 'distinct')
  for (const r of rows.slice(0, 3)) t.equal(r.embed_url, `http://h/embed/${r.embed_token}`, 'embed_url names the token, not the id')
  t.equal(rows[3].embed_url, null, 'a video without media keeps no embed_url')
  await t.rejects(sql`UPDATE videos SET embed_token = ${tokens[0]} WHERE id = ${rows[1].id}`, 'tokens are unique')
})
