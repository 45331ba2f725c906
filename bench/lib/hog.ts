/**
 * A CPU hog for `npm run bench -- --hog`: one busy-looping node process pinned to one core
 * with taskset(1), so the scenario runs as if that core were taken by another tenant. The
 * other processes are not pinned: the kernel moves them to the free core(s) and they share
 * the hogged one with the loop at fair share. stop() reports how much of its core it got.
 */
import { spawn, spawnSync } from 'node:child_process'
import { cpus } from 'node:os'
import { cpuUs } from './proc.js'

export interface Hog {
  pid: number
  /** Kills the loop; idempotent. share = its CPU time / wall time (1 = the whole core). */
  stop (): { seconds: number; cpuSeconds: number; share: number; core: number }
}

export async function startHog (core: number): Promise<Hog> {
  const n = cpus().length
  if (core >= n) throw new Error(`--hog-core ${core}: this machine has ${n} cores (0-${n - 1})`)
  if (spawnSync('taskset', ['-V']).error) throw new Error('--hog needs taskset (util-linux) on PATH')
  const child = spawn('taskset', ['-c', String(core), process.execPath, '-e', 'for (;;) {}'], { stdio: 'ignore' })
  await new Promise<void>((resolve, reject) => { child.once('spawn', resolve); child.once('error', reject) })
  // taskset execs node in place: the pid is the loop's once the exec happened.
  const t0 = performance.now()
  await new Promise(resolve => setTimeout(resolve, 100))
  if (child.exitCode !== null) throw new Error(`the CPU hog exited at once (${child.exitCode})`)
  const c0 = cpuUs(child.pid!)
  let result: ReturnType<Hog['stop']> | null = null
  return {
    pid: child.pid!,
    stop () {
      if (result) return result
      const cpu = cpuUs(child.pid!) - c0
      const seconds = (performance.now() - t0 - 100) / 1000
      child.kill('SIGKILL')
      result = { seconds, cpuSeconds: cpu / 1e6, share: seconds > 0 ? cpu / 1e6 / seconds : NaN, core }
      return result
    },
  }
}
