/**
 * Media tools on an ffmpeg binary shipped inside an npm package (@ffmpeg-installer/ffmpeg with
 * its per-platform package, e.g. @ffmpeg-installer/linux-x64: the binary is in the tarball,
 * nothing is downloaded at install time). FFMPEG_PATH overrides it (docs/providers.md "Media tools"):
 * - `thumbnail(video)`: a JPEG of a frame (library thumbnails of videos);
 * - `downscaleImage(bytes)`: a smaller JPEG copy (thumbnails of images);
 * - `makeVideo({width, height, seconds})`: a small valid H.264 MP4 of those dimensions and
 *   length (the simulated provider's media follow the request), cached by parameters;
 * - `makeImage({width, height, format})`: a PNG or JPEG of those dimensions, cached;
 * - `probe(media)`: width, height, duration and codec read from ffmpeg's own report (no ffprobe
 *   in the package), for content checks and tests.
 * Every call runs one ffmpeg process with a timeout (killed when it passes), at most
 * MEDIA_CONCURRENCY (2) at a time per process, and fails with a MediaError saying what and why.
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { fileTypeFromFile } from 'file-type'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** A media operation that could not be done: bad parameters, unreadable input, ffmpeg missing, failing or too slow. */
export class MediaError extends Error {
  readonly code = 'MEDIA_ERROR'
  constructor (message: string) { super(message); this.name = 'MediaError' }
}

export interface MediaOptions {
  /** Kill ffmpeg after this long (default 20000 ms). */
  timeoutMs?: number
}

const DEFAULT_TIMEOUT_MS = 20_000
const MAX_CONCURRENT = 2
const MAX_SIDE = 3840
const MAX_SECONDS = 60

let resolvedPath: string | null = null

/** The ffmpeg binary: FFMPEG_PATH, else the one inside @ffmpeg-installer's platform package. */
export function ffmpegPath (): string {
  if (process.env.FFMPEG_PATH) return process.env.FFMPEG_PATH
  if (resolvedPath) return resolvedPath
  try {
    const require = createRequire(import.meta.url)
    resolvedPath = (require('@ffmpeg-installer/ffmpeg') as { path: string }).path
    return resolvedPath
  } catch (err) {
    throw new MediaError(`no ffmpeg binary: @ffmpeg-installer/ffmpeg has none for ${process.platform}-${process.arch} (${String((err as Error)?.message ?? err)}); set FFMPEG_PATH`)
  }
}

// A small semaphore: ffmpeg is CPU-heavy, callers queue beyond MAX_CONCURRENT.
let running = 0
const waiting: Array<() => void> = []
async function slot<T> (fn: () => Promise<T>): Promise<T> {
  // A finishing run hands its slot straight to the next waiter, so a newcomer cannot slip in between.
  if (running >= MAX_CONCURRENT) await new Promise<void>(resolve => waiting.push(resolve))
  else running++
  try { return await fn() } finally {
    const next = waiting.shift()
    if (next) next()
    else running--
  }
}

/** ffmpeg processes running now (at most 2) and calls waiting for one. */
export function mediaLoad (): { running: number; waiting: number } { return { running, waiting: waiting.length } }

/** Runs ffmpeg; resolves with stdout and stderr, rejects with MediaError on a non-zero exit or the timeout. */
async function run (what: string, args: string[], opts: MediaOptions = {}): Promise<{ stdout: Buffer; stderr: string; code: number | null }> {
  const bin = ffmpegPath()
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS
  return slot(() => new Promise((resolve, reject) => {
    const child = spawn(bin, ['-hide_banner', '-nostdin', ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    const out: Buffer[] = []
    let err = ''
    let timedOut = false
    const timer = setTimeout(() => { timedOut = true; child.kill('SIGKILL') }, timeoutMs)
    child.stdout.on('data', (c: Buffer) => out.push(c))
    child.stderr.on('data', (c: Buffer) => { err += c.toString('utf8'); if (err.length > 64_000) err = err.slice(-32_000) })
    child.on('error', (e) => { clearTimeout(timer); reject(new MediaError(`${what}: cannot run ffmpeg (${bin}): ${e.message}`)) })
    child.on('close', (code) => {
      clearTimeout(timer)
      if (timedOut) return reject(new MediaError(`${what}: ffmpeg took longer than ${timeoutMs} ms`))
      resolve({ stdout: Buffer.concat(out), stderr: err, code })
    })
  }))
}

function lastLines (stderr: string, n = 3): string {
  return stderr.trim().split('\n').slice(-n).join(' | ').slice(0, 400)
}

/** Runs `fn` with a fresh temporary directory, removed afterwards. */
async function withTemp<T> (fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'genjobs-media-'))
  try { return await fn(dir) } finally { await rm(dir, { recursive: true, force: true }) }
}

/**
 * ffmpeg's demuxer for each container `file-type` detects from the magic bytes. Inputs are
 * provider results and uploads, so ffmpeg is never left to guess a format from the content or
 * the name (docs/operations.md "Hostile input"): anything else is refused before ffmpeg runs.
 */
const DEMUXERS: Record<string, string> = {
  mp4: 'mov', m4v: 'mov', mov: 'mov', m4a: 'mov', '3gp': 'mov',
  webm: 'matroska', mkv: 'matroska', avi: 'avi', mpg: 'mpeg', ts: 'mpegts', mts: 'mpegts',
  png: 'png_pipe', apng: 'png_pipe', jpg: 'jpeg_pipe', webp: 'webp_pipe', gif: 'gif',
  mp3: 'mp3', wav: 'wav', ogg: 'ogg', oga: 'ogg', opus: 'ogg', aac: 'aac',
}

/**
 * The input as ffmpeg arguments, for a file path or bytes written into `dir`: its demuxer named
 * explicitly and only the `file` protocol allowed (so a playlist or reference inside the media
 * can never make ffmpeg open a URL or another local file by another protocol).
 */
async function inputFile (what: string, dir: string, input: string | Buffer, name: string): Promise<string[]> {
  let p = input as string
  if (typeof input !== 'string') {
    if (input.length === 0) throw new MediaError(`${what}: empty input`)
    p = join(dir, name)
    await writeFile(p, input)
  }
  const type = await fileTypeFromFile(p).catch(() => undefined)
  const demuxer = type === undefined ? undefined : DEMUXERS[type.ext]
  if (demuxer === undefined) throw new MediaError(`${what}: unsupported input format (${type?.mime ?? 'not recognised'}); nothing was run`)
  return ['-protocol_whitelist', 'file', '-f', demuxer, '-i', p]
}

export interface ProbeResult {
  width: number
  height: number
  /** Seconds; null for a still image. */
  durationS: number | null
  /** The first video stream's codec (h264, mjpeg, png, ...). */
  videoCodec: string
  hasAudio: boolean
}

/** Reads a media file's first video stream and duration from `ffmpeg -i` (no ffprobe needed). */
export async function probe (input: string | Buffer, opts: MediaOptions = {}): Promise<ProbeResult> {
  return withTemp(async (dir) => {
    const args = await inputFile('probe', dir, input, 'probe.bin')
    const { stderr } = await run('probe', args, opts) // exits 1 ("At least one output file must be specified"): expected
    const video = /Stream #\d+:\d+(?:\[[^\]]*\])?(?:\([^)]*\))?: Video: (\w+)[^\n]*?, (\d{1,5})x(\d{1,5})/.exec(stderr)
    if (!video) throw new MediaError(`probe: no video or image stream (${lastLines(stderr, 1)})`)
    const d = /Duration: (\d+):(\d{2}):(\d{2}(?:\.\d+)?)/.exec(stderr)
    const durationS = d ? Number(d[1]) * 3600 + Number(d[2]) * 60 + Number(d[3]) : null
    return { videoCodec: video[1], width: Number(video[2]), height: Number(video[3]), durationS, hasAudio: /Stream #\d+:\d+[^\n]*: Audio: /.test(stderr) }
  })
}

export interface ThumbnailOptions extends MediaOptions {
  /** Width of the JPEG (height follows the aspect ratio; default 320, never wider than the video). */
  width?: number
  /** The frame's time (default 1 s, or the first frame of a shorter video). */
  atSeconds?: number
}

/** A JPEG of one frame of a video (path or bytes). */
export async function thumbnail (video: string | Buffer, opts: ThumbnailOptions = {}): Promise<Buffer> {
  const width = checkSide('width', opts.width ?? 320)
  return withTemp(async (dir) => {
    const input = await inputFile('thumbnail', dir, video, 'video.bin')
    const grab = async (at: number) => (await run('thumbnail', [
      '-loglevel', 'error', '-ss', String(at), ...input, '-frames:v', '1',
      '-vf', `scale='min(${width},iw)':-2`, '-q:v', '4', '-f', 'image2', '-c:v', 'mjpeg', 'pipe:1',
    ], opts))
    let r = await grab(opts.atSeconds ?? 1)
    if (r.stdout.length === 0 && r.code === 0) r = await grab(0) // shorter than the seek: first frame
    if (r.code !== 0 || r.stdout.length === 0) throw new MediaError(`thumbnail: no frame could be read (${lastLines(r.stderr) || `exit ${r.code}`})`)
    return r.stdout
  })
}

export interface DownscaleOptions extends MediaOptions {
  /** The copy fits in maxWidth x maxHeight (default 320 x 320), keeping the aspect ratio; never enlarged. */
  maxWidth?: number
  maxHeight?: number
}

/** A smaller JPEG copy of an image (PNG, JPEG, WebP, GIF's first frame). */
export async function downscaleImage (image: Buffer, opts: DownscaleOptions = {}): Promise<Buffer> {
  const w = checkSide('maxWidth', opts.maxWidth ?? 320)
  const h = checkSide('maxHeight', opts.maxHeight ?? 320)
  return withTemp(async (dir) => {
    const input = await inputFile('downscaleImage', dir, image, 'image.bin')
    const r = await run('downscaleImage', [
      '-loglevel', 'error', ...input, '-frames:v', '1',
      '-vf', `scale=w='min(${w},iw)':h='min(${h},ih)':force_original_aspect_ratio=decrease`,
      '-q:v', '4', '-f', 'image2', '-c:v', 'mjpeg', 'pipe:1',
    ], opts)
    if (r.code !== 0 || r.stdout.length === 0) throw new MediaError(`downscaleImage: not a readable image (${lastLines(r.stderr) || `exit ${r.code}`})`)
    return r.stdout
  })
}

export interface VideoSpec { width: number; height: number; seconds: number }
export interface ImageSpec { width: number; height: number; format?: 'png' | 'jpeg' }

// Generated media by parameters: the simulated provider asks for the same few sizes again and again.
const CACHE_MAX = 32
const cache = new Map<string, Promise<Buffer>>()
function cached (key: string, make: () => Promise<Buffer>): Promise<Buffer> {
  const hit = cache.get(key)
  if (hit) { cache.delete(key); cache.set(key, hit); return hit } // LRU touch
  const p = make()
  cache.set(key, p)
  p.catch(() => cache.delete(key)) // a failure is not cached
  while (cache.size > CACHE_MAX) cache.delete(cache.keys().next().value as string)
  return p
}

/** How many generated files are cached (operators and tests read it). */
export function generatedCacheSize (): number { return cache.size }

/**
 * A small valid H.264 MP4 (yuv420p, faststart, a moving test pattern (lavfi testsrc, ~20 KB for 2 s of 640x360) at 12 fps, no audio) of
 * exactly width x height and `seconds` long. Width and height must be even (H.264 4:2:0).
 */
export async function makeVideo (spec: VideoSpec, opts: MediaOptions = {}): Promise<Buffer> {
  const width = checkSide('width', spec.width, true)
  const height = checkSide('height', spec.height, true)
  if (!Number.isFinite(spec.seconds) || spec.seconds < 0.1 || spec.seconds > MAX_SECONDS) throw new MediaError(`seconds must be between 0.1 and ${MAX_SECONDS}, got ${spec.seconds}`)
  const seconds = Math.round(spec.seconds * 1000) / 1000
  return cached(`v:${width}x${height}:${seconds}`, () => withTemp(async (dir) => {
    const out = join(dir, `${randomBytes(4).toString('hex')}.mp4`)
    const r = await run('makeVideo', [
      '-loglevel', 'error', '-f', 'lavfi', '-i', `testsrc=size=${width}x${height}:rate=12:duration=${seconds}`,
      '-c:v', 'libx264', '-preset', 'ultrafast', '-crf', '35', '-pix_fmt', 'yuv420p', '-movflags', '+faststart', '-y', out,
    ], { timeoutMs: opts.timeoutMs ?? 60_000 })
    if (r.code !== 0) throw new MediaError(`makeVideo: ffmpeg failed (${lastLines(r.stderr) || `exit ${r.code}`})`)
    return readFile(out)
  }))
}

/** A PNG (default) or JPEG test pattern of width x height. */
export async function makeImage (spec: ImageSpec, opts: MediaOptions = {}): Promise<Buffer> {
  const width = checkSide('width', spec.width)
  const height = checkSide('height', spec.height)
  const format = spec.format ?? 'png'
  if (format !== 'png' && format !== 'jpeg') throw new MediaError(`format must be png or jpeg, got ${String(format)}`)
  return cached(`i:${width}x${height}:${format}`, async () => {
    const r = await run('makeImage', [
      '-loglevel', 'error', '-f', 'lavfi', '-i', `testsrc2=size=${width}x${height}:rate=1:duration=1`, '-frames:v', '1',
      ...(format === 'png' ? ['-c:v', 'png'] : ['-c:v', 'mjpeg', '-q:v', '3']), '-f', 'image2', 'pipe:1',
    ], opts)
    if (r.code !== 0 || r.stdout.length === 0) throw new MediaError(`makeImage: ffmpeg failed (${lastLines(r.stderr) || `exit ${r.code}`})`)
    return r.stdout
  })
}

function checkSide (name: string, v: number, even = false): number {
  if (!Number.isInteger(v) || v < 16 || v > MAX_SIDE) throw new MediaError(`${name} must be an integer between 16 and ${MAX_SIDE}, got ${v}`)
  if (even && v % 2 !== 0) throw new MediaError(`${name} must be even for H.264 (4:2:0), got ${v}`)
  return v
}
