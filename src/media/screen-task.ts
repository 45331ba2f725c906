import { readFile } from 'node:fs/promises'
import { imageMetadataText, MetadataBudgetExceeded, screenText } from '../moderation.js'

/**
 * piscina task (src/media/screen.ts): an uploaded image's content screen off the event loop.
 * Reads the spooled file itself (only a path crosses the thread boundary), extracts its text
 * metadata within the byte and time budgets of src/moderation.ts and matches the term list.
 */
export interface ScreenTask { path: string; format: string; filename: string; terms: readonly string[] }

/** The screen's verdict: the matched term, or why the metadata could not be read in full. */
export type ScreenResult = { ok: true; term: string | null } | { ok: false; budget: 'bytes' | 'time' }

export default async function run (task: ScreenTask): Promise<ScreenResult> {
  const buf = await readFile(task.path)
  let text: string
  try {
    text = `${task.filename}\n${imageMetadataText(buf, task.format)}`
  } catch (e) {
    if (e instanceof MetadataBudgetExceeded) return { ok: false, budget: e.budget }
    throw e
  }
  return { ok: true, term: screenText(text, task.terms) }
}
