import { ManagedWorker } from '../threads/worker-lifecycle.js'
import type { FromWriter, ToWriter } from './file-writer-protocol.js'

/** A write not answered by then fails (and is retried by its caller, as any failed put). */
const WRITE_TIMEOUT_MS = 60_000

/**
 * A thread that writes small objects for one LocalStorage (docs/decisions.md "Small objects
 * written by a writer thread"). Started on the first put; it keeps the process alive only while
 * a write is pending, and a crashed writer is restarted (what was pending on it fails).
 */
export class FileWriter {
  private w: ManagedWorker<ToWriter, FromWriter> | null = null
  private pending = 0

  private worker (): ManagedWorker<ToWriter, FromWriter> {
    if (this.w !== null) return this.w
    const w = new ManagedWorker<ToWriter, FromWriter>({
      url: new URL('./file-writer-worker.js', import.meta.url),
      data: () => null,
      name: 'file writer',
      handlers: {},
      timeoutMs: WRITE_TIMEOUT_MS,
      onRestart: () => { if (this.pending === 0) w.worker.unref() },
    })
    this.w = w
    return w
  }

  /** Writes `bytes` (moved to the writer: detached here) to `tmp`, then renames it to `path`. */
  async put (tmp: string, path: string, bytes: Uint8Array): Promise<void> {
    const w = this.worker()
    if (this.pending++ === 0) w.worker.ref()
    try {
      await w.channel.ask('put', { tmp, path, bytes }, WRITE_TIMEOUT_MS, [bytes.buffer as ArrayBuffer])
    } finally {
      if (--this.pending === 0 && this.w === w) w.worker.unref()
    }
  }

  /** Stops the thread (a later put starts another). */
  async close (): Promise<void> {
    const w = this.w
    this.w = null
    if (w !== null) await w.close()
  }
}
