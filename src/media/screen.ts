import { Piscina } from 'piscina'
import type { ScreenResult, ScreenTask } from './screen-task.js'

/**
 * The upload content screen's thread (docs/operations.md "Hostile input"): decoding an image's
 * metadata (inflating compressed text chunks, scanning for XMP) can take milliseconds, so it
 * runs on one piscina thread, never on a thread that serves connections. A task still running
 * after `timeoutMs` is aborted (its thread ended) and reads as over the time budget.
 */
export class ImageScreen {
  private readonly pool = new Piscina({
    filename: new URL('./screen-task.js', import.meta.url).href,
    minThreads: 0,
    maxThreads: 1,
    idleTimeout: 30_000,
  })

  constructor (private readonly timeoutMs = 5_000) {}

  async screen (task: ScreenTask): Promise<ScreenResult> {
    try {
      return await this.pool.run(task, { signal: AbortSignal.timeout(this.timeoutMs) }) as ScreenResult
    } catch (e) {
      if ((e as Error).name === 'AbortError' || (e as Error).name === 'TimeoutError') return { ok: false, budget: 'time' }
      throw e
    }
  }

  close (): Promise<void> { return this.pool.destroy() }
}
