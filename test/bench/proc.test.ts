// The benchmark's process probes (bench/lib/proc.ts): the filesystem probe (fileCreateCost) creates
// files as local storage writes a result, answers a cost a file, and leaves nothing behind in the
// data's directory (os.tmpdir()); minorFaults counts a process's page faults.
import { readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import t from 'tap'
import { fileCreateCost, minorFaults } from '../../bench/lib/proc.js'

const probes = (): string[] => readdirSync(tmpdir()).filter(n => n.startsWith('genjobs-bench-fsprobe-'))

t.test('fileCreateCost answers µs a file and removes its files', async (t) => {
  const before = probes().length
  const c = fileCreateCost(50)
  t.ok(Number.isInteger(c.cpuUs) && c.cpuUs >= 0, `cpu ${c.cpuUs} µs`)
  t.ok(Number.isInteger(c.wallUs) && c.wallUs > 0, `wall ${c.wallUs} µs`)
  t.equal(probes().length, before, 'its directory is gone')
})

t.test('minorFaults counts the faults of touching fresh pages, and 0 for a process that is gone', async (t) => {
  const before = minorFaults(process.pid)
  t.ok(before > 0, `${before} so far`)
  // 32 MiB written page by page: memory the process never touched, each page a first-touch fault
  // (at least 16 even where transparent huge pages map it 2 MiB at a time).
  const b = Buffer.alloc(32 * 1024 * 1024)
  for (let i = 0; i < b.length; i += 4096) b[i] = 1
  const after = minorFaults(process.pid)
  t.ok(after - before >= 16, `${after - before} faults for 32 MiB of fresh pages`)
  t.equal(minorFaults(2 ** 22 + 7), 0, 'no such process')
})
