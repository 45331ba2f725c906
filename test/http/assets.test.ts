// GET /v1/assets (docs/api.md "Jobs"; list envelope and item shape of docs/api.md "Endpoints").
import t from 'tap'
import { assertError } from '../helpers/assert.js'
import { createUser, startServer, type TestUser } from '../helpers/server.js'

const s = await startServer(t, { TIER_LIMITS: JSON.stringify({ free: { rpm: 1_000_000 }, pro: { rpm: 1_000_000 } }) })

async function addAsset (u: TestUser, kind: 'character' | 'voice', name: string) {
  const r = await s.req('POST', `/v1/admin/accounts/${u.id}/assets`, { admin: true, body: { kind, name } })
  if (r.status !== 201) throw new Error(`asset: ${r.status} ${r.text}`)
  return r.body as { id: number; kind: string; name: string; created_at: string }
}

const a = await createUser(s, { credits: 1000 })
const b = await createUser(s)
const made = [
  await addAsset(a, 'character', 'Ada'),
  await addAsset(a, 'voice', 'Warm narrator'),
  await addAsset(a, 'character', 'Bob'),
  await addAsset(a, 'voice', 'Radio host'),
  await addAsset(a, 'character', 'Cy'),
]
const foreign = await addAsset(b, 'voice', 'Not yours')

t.test('lists the caller\'s characters and voices, newest first, in the list envelope', async (t) => {
  const r = await s.req('GET', '/v1/assets', { key: a.key })
  t.equal(r.status, 200)
  t.same(Object.keys(r.body).sort(), ['data', 'has_more', 'limit', 'offset', 'total'])
  t.equal(r.body.total, 5)
  t.equal(r.body.limit, 20, 'default limit')
  t.equal(r.body.offset, 0)
  t.equal(r.body.has_more, false)
  t.same(r.body.data, made.slice().reverse(), 'items {id, kind, name, created_at} exactly as the operator API created them, newest first')
  t.notOk(r.body.data.some((x: any) => x.id === foreign.id), 'another account\'s asset is not listed')

  const other = await s.req('GET', '/v1/assets', { key: b.key })
  t.same(other.body.data, [foreign])
  const session = await s.req('GET', '/v1/assets', { jwt: a.jwt })
  t.equal(session.status, 200, 'a dashboard session may list too')
  t.equal(session.body.total, 5)
})

t.test('kind filter and paging', async (t) => {
  const ch = await s.req('GET', '/v1/assets?kind=character', { key: a.key })
  t.equal(ch.body.total, 3)
  t.same(ch.body.data.map((x: any) => x.name), ['Cy', 'Bob', 'Ada'])
  const vo = await s.req('GET', '/v1/assets?kind=voice&limit=1', { key: a.key })
  t.equal(vo.body.total, 2)
  t.same(vo.body.data.map((x: any) => x.name), ['Radio host'])
  t.equal(vo.body.has_more, true)
  const vo2 = await s.req('GET', '/v1/assets?kind=voice&limit=1&offset=1', { key: a.key })
  t.same(vo2.body.data.map((x: any) => x.name), ['Warm narrator'])
  t.equal(vo2.body.has_more, false)
  const past = await s.req('GET', '/v1/assets?offset=50', { key: a.key })
  t.same(past.body.data, [])
  t.equal(past.body.total, 5)
  const none = await s.req('GET', '/v1/assets', { key: (await createUser(s)).key })
  t.same(none.body, { data: [], total: 0, limit: 20, offset: 0, has_more: false })
})

t.test('bad query: kind, limit and offset outside their ranges answer 400 VALIDATION_ERROR', async (t) => {
  for (const q of ['kind=image', 'kind=', 'limit=0', 'limit=101', 'limit=x', 'offset=-1']) {
    assertError(t, await s.req('GET', `/v1/assets?${q}`, { key: a.key }), 400, 'VALIDATION_ERROR', q)
  }
  assertError(t, await s.req('GET', '/v1/assets'), 401, 'AUTH_REQUIRED')
})

t.test('listed ids are what gemini-omni accepts; another account\'s id is 422 with param', async (t) => {
  const list = (await s.req('GET', '/v1/assets', { key: a.key })).body.data as Array<{ id: number; kind: string }>
  const character = list.find(x => x.kind === 'character')!.id
  const voice = list.find(x => x.kind === 'voice')!.id
  const body = (v: number) => ({ model: 'gemini-omni', prompt: 'talking head', resolution: '1080p', duration: '4', character_asset_ids: [character], voice_asset_ids: [v] })
  const bad = await s.req('POST', '/v1/generate/video', { key: a.key, body: body(foreign.id) })
  assertError(t, bad, 422, 'UNSUPPORTED_OPTION')
  t.equal(bad.body.param, 'voice_asset_ids')
  const ok = await s.req('POST', '/v1/generate/video', { key: a.key, body: body(voice) })
  t.equal(ok.status, 201, ok.text)
})
