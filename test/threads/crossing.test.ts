// The thread crossing: a batch crosses as a plain object (no buffer shared
// between posts), and a job's prompt crosses once.
import t from 'tap'
import { serialize } from 'node:v8'
import { Channel, type PortLike } from '../../src/threads/channel.js'
import type { FromShard, ToShard } from '../../src/shard/protocol.js'
import { orderOf, specOf, specOfOrder } from '../../src/jobs/spec.js'
import { validateAudio, validateVideo } from '../../src/catalog/index.js'

const prompt = '提示'.repeat(5000) // 10,000 characters
const policy = {}

function occurrences (hay: string, needle: string): number {
  let n = 0
  for (let i = hay.indexOf(needle); i !== -1; i = hay.indexOf(needle, i + needle.length)) n++
  return n
}

t.test('a job order carries the prompt once and rebuilds the same spec on arrival', async (t) => {
  const spec = specOf(validateVideo({ model: 'seedance-2-mini', prompt, resolution: '480p', duration: '6' }, policy))
  t.ok(occurrences(JSON.stringify(spec), prompt) >= 3, 'the full spec holds it three times or more (prompt, request.prompt, directiveText)')
  const order = orderOf(spec)
  t.equal(occurrences(JSON.stringify(order), prompt), 1, 'the order holds it once')
  t.same(specOfOrder(structuredClone(order)), spec, 'the shard rebuilds the same spec')
  const audio = specOf(validateAudio({ model: 'voiceover', text: 'hello there', voice_id: 'alloy' }, policy))
  t.same(specOfOrder(structuredClone(orderOf(audio))), audio, 'audio: directive text from text, no prompt')
})

/** The main thread's side of a shard channel whose posts land in `posted`. */
function shardChannel (posted: unknown[]): Channel<ToShard, FromShard> {
  const port: PortLike = { postMessage: (v) => posted.push(v) }
  return new Channel<ToShard, FromShard>(port, { peer: 'shard 0', handlers: {} })
}

t.test('each post is its own object: a large post does not make later small ones larger', async (t) => {
  const posted: unknown[] = []
  const ch = shardChannel(posted)
  ch.ask('shard.ping', { type: 'shard.ping' }).catch(() => {})
  ch.flush()
  ch.ask('account.get', { type: 'account.get', accountId: 1, pad: prompt } as any).catch(() => {})
  ch.flush()
  ch.ask('shard.ping', { type: 'shard.ping' }).catch(() => {})
  ch.flush()
  t.equal(posted.length, 3)
  t.notOk(posted.some(p => p instanceof Uint8Array || p instanceof ArrayBuffer), 'plain objects, no views into a shared buffer')
  t.ok(serialize(posted[1]).length > 20_000, 'the large post carries its prompt')
  t.equal(serialize(posted[2]).length, serialize(posted[0]).length, 'the next small post is as small as before')
  ch.close()
})

t.test('one post per event-loop turn, whatever was queued', async (t) => {
  const posted: unknown[] = []
  const ch = shardChannel(posted)
  const asks = Array.from({ length: 5 }, (_, i) => ch.ask('account.get', { type: 'account.get', accountId: i + 1 }))
  for (const p of asks) p.catch(() => {})
  await new Promise(resolve => setImmediate(resolve))
  t.equal(posted.length, 1)
  t.equal((posted[0] as any).ask.length, 5)
  ch.close()
})
