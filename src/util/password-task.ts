import { randomBytes, scrypt as scryptCb, timingSafeEqual } from 'node:crypto'
import { promisify } from 'node:util'

/**
 * piscina task: scrypt password hashing off the main thread (docs/architecture.md "Threads": stateless
 * CPU work only). Format: scrypt$N$r$p$salt(b64)$hash(b64).
 */
const scrypt = promisify(scryptCb) as (pw: string, salt: Buffer, len: number, opts: { N: number; r: number; p: number; maxmem: number }) => Promise<Buffer>
const N = 16384
const R = 8
const P = 1

export type PasswordTask = { op: 'hash'; password: string } | { op: 'verify'; password: string; hash: string }

export default async function run (task: PasswordTask): Promise<string | boolean> {
  if (task.op === 'hash') {
    const salt = randomBytes(16)
    const dk = await scrypt(task.password, salt, 32, { N, r: R, p: P, maxmem: 64 * 1024 * 1024 })
    return `scrypt$${N}$${R}$${P}$${salt.toString('base64')}$${dk.toString('base64')}`
  }
  const parts = task.hash.split('$')
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false
  const [n, r, p] = [Number(parts[1]), Number(parts[2]), Number(parts[3])]
  const salt = Buffer.from(parts[4], 'base64')
  const expected = Buffer.from(parts[5], 'base64')
  const dk = await scrypt(task.password, salt, expected.length, { N: n, r, p, maxmem: 64 * 1024 * 1024 })
  return timingSafeEqual(dk, expected)
}
