import { createHash } from 'node:crypto'
import { downscaleImage, thumbnail } from '../media/ffmpeg.js'
import type { Storage } from '../storage/storage.js'

/**
 * Library thumbnails (docs/api.md "Jobs", Library): a JPEG of a frame for a
 * video, a downscaled JPEG for an image, stored next to the results under `thumbs/<sha256 of
 * the media>.jpg`. Keyed by content, so identical results (the simulated provider's) share one
 * thumbnail and ffmpeg runs once for them. Only media in our own storage is read.
 */
export async function thumbnailFor (storage: Storage, kind: 'video' | 'image', url: string): Promise<string> {
  const own = storage.url('')
  if (!url.startsWith(own)) throw new Error('thumbnails are made from our stored copy only')
  const key = decodeURIComponent(url.slice(own.length).split('?')[0])
  const chunks: Buffer[] = []
  for await (const c of await storage.read(key)) chunks.push(c as Buffer)
  const bytes = Buffer.concat(chunks)
  const thumbKey = `thumbs/${createHash('sha256').update(bytes).digest('hex').slice(0, 32)}.jpg`
  if (!(await storage.head(thumbKey))) {
    const jpeg = kind === 'video' ? await thumbnail(bytes, { width: 480 }) : await downscaleImage(bytes, { maxWidth: 480, maxHeight: 480 })
    await storage.put(thumbKey, jpeg, 'image/jpeg')
  }
  return storage.url(thumbKey)
}

/** The embed page of a library video: `{PUBLIC_BASE_URL}/embed/{token}` (src/media/embed.ts newEmbedToken). */
export function embedUrlOf (publicBaseUrl: string, token: string): string {
  return `${publicBaseUrl}/embed/${token}`
}
