// Media tools (src/media/ffmpeg.ts) on the ffmpeg binary of @ffmpeg-installer: real
// dimensions and durations read back from the files they make.
import { readFileSync } from 'node:fs'
import t from 'tap'
import { downscaleImage, ffmpegPath, generatedCacheSize, makeImage, makeVideo, MediaError, probe, thumbnail } from '../../src/media/ffmpeg.js'

const SAMPLE_MP4 = new URL('../../../assets/sim/sample.mp4', import.meta.url).pathname
const SAMPLE_PNG = new URL('../../../assets/sim/sample.png', import.meta.url).pathname

/** CPU ms used by finished child processes of this process (utime+stime of waited-for children, /proc/self/stat). */
function childCpuMs (): number {
  const stat = readFileSync('/proc/self/stat', 'utf8')
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(f[13]) + Number(f[14])) * 10 // cutime, cstime in clock ticks (100/s)
}

const isJpeg = (b: Buffer) => b[0] === 0xff && b[1] === 0xd8 && b[b.length - 2] === 0xff && b[b.length - 1] === 0xd9

t.test('the ffmpeg binary comes from the npm package and has libx264', async (t) => {
  t.match(ffmpegPath(), /node_modules\/@ffmpeg-installer\/linux-x64\/ffmpeg$/)
})

t.test('makeVideo makes an H.264 MP4 of exactly the asked dimensions and length (landscape, portrait, square), faststart', async (t) => {
  for (const spec of [{ width: 640, height: 360, seconds: 2 }, { width: 360, height: 640, seconds: 3 }, { width: 480, height: 480, seconds: 1.5 }]) {
    const cpu0 = childCpuMs()
    const mp4 = await makeVideo(spec)
    const cpu = childCpuMs() - cpu0
    t.equal(mp4.subarray(4, 8).toString('latin1'), 'ftyp', 'an MP4')
    t.ok(mp4.indexOf('moov') < mp4.indexOf('mdat'), 'moov before mdat: plays while it downloads')
    const p = await probe(mp4)
    t.equal(p.videoCodec, 'h264')
    t.equal(p.width, spec.width)
    t.equal(p.height, spec.height)
    t.ok(p.durationS !== null && Math.abs(p.durationS - spec.seconds) <= 0.1, `duration ${p.durationS} s for ${spec.seconds} s`)
    t.comment(`${spec.width}x${spec.height} ${spec.seconds} s: ${mp4.length} bytes, ${cpu} ms ffmpeg CPU (machine shared and loaded)`)
  }
})

t.test('makeVideo is cached by parameters; a different length is a different file', async (t) => {
  const a = await makeVideo({ width: 320, height: 180, seconds: 1 })
  const n = generatedCacheSize()
  const cpu0 = childCpuMs()
  const b = await makeVideo({ width: 320, height: 180, seconds: 1 })
  t.equal(b, a, 'the same buffer')
  t.equal(childCpuMs() - cpu0, 0, 'no ffmpeg run for a cached size')
  t.equal(generatedCacheSize(), n)
  const c = await makeVideo({ width: 320, height: 180, seconds: 2 })
  t.not(c, a)
  t.ok(Math.abs((await probe(c)).durationS! - 2) <= 0.1)
})

t.test('makeVideo refuses odd, tiny, huge or non-integer sizes and bad lengths with a MediaError', async (t) => {
  for (const bad of [
    { width: 641, height: 360, seconds: 1 }, { width: 8, height: 8, seconds: 1 }, { width: 8000, height: 360, seconds: 1 },
    { width: 640.5, height: 360, seconds: 1 }, { width: 640, height: 360, seconds: 0 }, { width: 640, height: 360, seconds: 61 },
    { width: 640, height: 360, seconds: Number.NaN }
  ]) {
    const e = await makeVideo(bad).catch(e => e)
    t.type(e, MediaError, JSON.stringify(bad))
  }
  t.match((await makeVideo({ width: 641, height: 360, seconds: 1 }).catch(e => e)).message, /width must be even/)
})

t.test('makeImage makes PNG and JPEG of the asked size', async (t) => {
  const png = await makeImage({ width: 1024, height: 768 })
  t.equal(png.subarray(1, 4).toString('latin1'), 'PNG')
  t.match(await probe(png), { width: 1024, height: 768, videoCodec: 'png' })
  const jpg = await makeImage({ width: 300, height: 500, format: 'jpeg' })
  t.ok(isJpeg(jpg))
  t.match(await probe(jpg), { width: 300, height: 500, videoCodec: 'mjpeg' })
  t.type(await makeImage({ width: 100, height: 100, format: 'gif' as any }).catch(e => e), MediaError)
})

t.test('thumbnail: a JPEG frame of a video, from a path or bytes, at most 320 wide keeping the aspect ratio', async (t) => {
  const fromPath = await thumbnail(SAMPLE_MP4)
  t.ok(isJpeg(fromPath), 'JPEG')
  const src = await probe(SAMPLE_MP4)
  const p = await probe(fromPath)
  t.ok(p.width <= 320 && p.width <= src.width)
  t.ok(Math.abs(p.width / p.height - src.width / src.height) < 0.05, `aspect ${p.width}x${p.height} of ${src.width}x${src.height}`)
  const portrait = await makeVideo({ width: 360, height: 640, seconds: 2 })
  const thumb = await thumbnail(portrait)
  t.match(await probe(thumb), { width: 320, height: 568 }, 'portrait video: 320 wide, height by aspect (even)')
  const short = await makeVideo({ width: 320, height: 180, seconds: 0.5 })
  t.ok(isJpeg(await thumbnail(short)), 'a video shorter than the 1 s seek: its first frame')
  t.match(await probe(await thumbnail(portrait, { width: 160 })), { width: 160 })
})

t.test('downscaleImage: fits 320x320, keeps the aspect ratio, never enlarges', async (t) => {
  const big = await makeImage({ width: 1024, height: 768 })
  const small = await downscaleImage(big)
  t.ok(isJpeg(small))
  t.match(await probe(small), { width: 320, height: 240 })
  const tall = await downscaleImage(await makeImage({ width: 400, height: 1000, format: 'jpeg' }))
  t.match(await probe(tall), { width: 128, height: 320 })
  const sample = readFileSync(SAMPLE_PNG)
  const s = await probe(sample)
  const copy = await probe(await downscaleImage(sample, { maxWidth: 3840, maxHeight: 3840 }))
  t.same([copy.width, copy.height], [s.width, s.height], 'smaller than the box: same size')
})

t.test('bad input, a missing binary and a timeout are MediaErrors that say why', async (t) => {
  const garbage = Buffer.from('this is not a video at all')
  const e1 = await thumbnail(garbage).catch(e => e)
  t.type(e1, MediaError)
  t.match(e1.message, /^thumbnail: unsupported input format \(not recognised\); nothing was run/)
  // A playlist naming other files or URLs is never handed to ffmpeg (it would follow them):
  // the input's format is checked first and named to ffmpeg with -f, and only file: is allowed.
  const playlist = Buffer.from('#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nhttp://169.254.169.254/latest/meta-data\n#EXTINF:1,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n')
  const e0 = await probe(playlist).catch(e => e)
  t.type(e0, MediaError)
  t.match(e0.message, /^probe: unsupported input format/)
  // A real PNG is read with its demuxer named.
  t.equal((await probe(await makeImage({ width: 64, height: 48 }))).width, 64)
  t.type(await downscaleImage(garbage).catch(e => e), MediaError)
  t.type(await thumbnail(Buffer.alloc(0)).catch(e => e), MediaError, 'empty')
  t.type(await probe(garbage).catch(e => e), MediaError)
  const slow = await makeVideo({ width: 1280, height: 720, seconds: 30 }, { timeoutMs: 50 }).catch(e => e)
  t.type(slow, MediaError)
  t.match(slow.message, /took longer than 50 ms/)
  const ok = await makeVideo({ width: 1280, height: 720, seconds: 30 }, { timeoutMs: 1 }).catch(e => e)
  t.type(ok, MediaError, 'a failed generation is not cached: asking again runs again')
  const saved = process.env.FFMPEG_PATH
  process.env.FFMPEG_PATH = '/nonexistent/ffmpeg'
  try {
    const e = await makeImage({ width: 50, height: 50 }).catch(e => e)
    t.type(e, MediaError)
    t.match(e.message, /cannot run ffmpeg/)
  } finally {
    if (saved === undefined) delete process.env.FFMPEG_PATH
    else process.env.FFMPEG_PATH = saved
  }
})

t.test('at most two ffmpeg processes at once; the others wait and all finish', async (t) => {
  const { mediaLoad } = await import('../../src/media/ffmpeg.js')
  let maxRunning = 0
  const timer = setInterval(() => { maxRunning = Math.max(maxRunning, mediaLoad().running) }, 1)
  const sizes = [40, 42, 44, 46, 48, 50]
  const started = sizes.map(w => makeImage({ width: w, height: 32, format: 'jpeg' }))
  t.equal(mediaLoad().running + mediaLoad().waiting <= sizes.length, true)
  const done = await Promise.all(started)
  clearInterval(timer)
  t.equal(done.length, sizes.length)
  t.ok(maxRunning <= 2 && maxRunning >= 1, `peak ${maxRunning} running`)
  t.same(mediaLoad(), { running: 0, waiting: 0 }, 'all slots released')
  for (const [i, w] of sizes.entries()) t.equal((await probe(done[i])).width, w)
})
