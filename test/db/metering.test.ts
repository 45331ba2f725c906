// Request metering writes (src/db/metering.ts) against a real PostgreSQL.
import t from 'tap'
import { connect } from '../../src/db/connect.js'
import { writeMeterBatch, type MeterRow } from '../../src/db/metering.js'
import { migrate } from '../../src/db/migrate.js'
import { freshDatabase } from '../helpers/db.js'

const sql = connect(await freshDatabase(t), { max: 2 })
t.teardown(() => sql.end({ timeout: 5 }))
await migrate(sql)

t.test('a flush larger than one INSERT can carry (65534 parameters) is written whole, in one transaction', async (t) => {
  // 9 columns per row: 7282 rows already exceed one statement; a busy second buffers far more.
  const n = 12_001
  const at = new Date()
  const rows: MeterRow[] = Array.from({ length: n }, (_, i) => ({
    at, account_id: 1 + (i % 3), key_id: null, method: 'GET', endpoint: '/v1/models', status: i % 10 === 0 ? 500 : 200, credits: 0, latency_ms: 0.5, request_id: `req_${i}`,
  }))
  await writeMeterBatch(sql, rows)
  const [{ raw }] = await sql<{ raw: number }[]>`SELECT count(*)::int AS raw FROM request_log`
  t.equal(raw, n, 'every raw row')
  const [{ requests, errors }] = await sql<{ requests: number; errors: number }[]>`SELECT sum(requests)::int AS requests, sum(errors)::int AS errors FROM usage_daily`
  t.equal(requests, n, 'every row rolled up')
  t.equal(errors, Math.ceil(n / 10))
})

t.test('values that COPY text would misread (tab, newline, backslash) are stored as given', async (t) => {
  const odd = 'req\ta\\b\nc\rd\\N'
  await writeMeterBatch(sql, [{ at: new Date(), account_id: null, key_id: 7, method: 'GET', endpoint: '/v1/x\\y', status: 404, credits: 0, latency_ms: 1e-7, request_id: odd }])
  const [r] = await sql<{ request_id: string; endpoint: string; account_id: number | null; key_id: number }[]>`SELECT request_id, endpoint, account_id, key_id FROM request_log WHERE key_id = 7`
  t.equal(r.request_id, odd)
  t.equal(r.endpoint, '/v1/x\\y')
  t.equal(r.account_id, null)
})
