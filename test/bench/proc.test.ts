// The benchmark's filesystem probe (bench/lib/proc.ts fileCreateCost): it creates files as local
// storage writes a result, answers a cost a file, and leaves nothing behind in the data's
// directory (os.tmpdir()).
import { readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import t from 'tap'
import { fileCreateCost } from '../../bench/lib/proc.js'

const probes = (): string[] => readdirSync(tmpdir()).filter(n => n.startsWith('genjobs-bench-fsprobe-'))

t.test('fileCreateCost answers µs a file and removes its files', async (t) => {
  const before = probes().length
  const c = fileCreateCost(50)
  t.ok(Number.isInteger(c.cpuUs) && c.cpuUs >= 0, `cpu ${c.cpuUs} µs`)
  t.ok(Number.isInteger(c.wallUs) && c.wallUs > 0, `wall ${c.wallUs} µs`)
  t.equal(probes().length, before, 'its directory is gone')
})
