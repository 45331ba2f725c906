import { Piscina } from 'piscina'

/** Password hashing through a small piscina pool (scrypt costs ~50 ms of CPU). */
export class Passwords {
  private readonly pool = new Piscina({
    filename: new URL('./password-task.js', import.meta.url).href,
    minThreads: 0,
    maxThreads: 2,
    idleTimeout: 30_000,
  })

  hash (password: string): Promise<string> {
    return this.pool.run({ op: 'hash', password }) as Promise<string>
  }

  verify (password: string, hash: string): Promise<boolean> {
    return this.pool.run({ op: 'verify', password, hash }) as Promise<boolean>
  }

  close (): Promise<void> { return this.pool.destroy() }
}
