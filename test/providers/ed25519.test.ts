// Callback signature checks (src/providers/ed25519.ts): libsodium and node:crypto give the same
// answer for good signatures, tampered messages and signatures, another key's signature and
// malformed input.
import { generateKeyPairSync, randomBytes, sign } from 'node:crypto'
import t from 'tap'
import { keyThatVerifies, Ed25519Key, ed25519Implementation, type Ed25519Implementation } from '../../src/providers/ed25519.js'

function pair (): { x: string; sign: (m: Buffer) => Buffer } {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519')
  return { x: publicKey.export({ format: 'jwk' }).x!, sign: (m) => sign(null, m, privateKey) }
}

t.test('this machine loads the libsodium addon (the fast path the benchmarks measure)', async (t) => {
  t.equal(ed25519Implementation, 'libsodium')
})

const impls: Ed25519Implementation[] = ['libsodium', 'node:crypto']
for (const impl of impls) {
  t.test(`${impl}: good, tampered, foreign and malformed signatures`, async (t) => {
    const a = pair()
    const b = pair()
    const key = new Ed25519Key(a.x, impl)
    for (let i = 0; i < 50; i++) {
      const msg = randomBytes(1 + (i * 37) % 300)
      const sig = a.sign(msg)
      t.equal(await key.verify(msg, sig), true, 'its own signature')
      const m2 = Buffer.from(msg); m2[i % m2.length] ^= 1
      t.equal(await key.verify(m2, sig), false, 'message changed')
      const s2 = Buffer.from(sig); s2[i % 64] ^= 0x10
      t.equal(await key.verify(msg, s2), false, 'signature changed')
      t.equal(await key.verify(msg, b.sign(msg)), false, 'another key')
    }
    const msg = Buffer.from('x')
    t.equal(await key.verify(msg, Buffer.alloc(63)), false, 'short signature')
    t.equal(await key.verify(msg, Buffer.alloc(65)), false, 'long signature')
    t.equal(await key.verify(msg, Buffer.alloc(64)), false, 'zero signature')
  })
}

t.test('a key that is not an Ed25519 public key is refused', async (t) => {
  t.throws(() => new Ed25519Key('AAAA'))
  t.throws(() => new Ed25519Key(''))
  t.throws(() => new Ed25519Key(Buffer.alloc(33).toString('base64url')))
})

t.test('keyThatVerifies: the one of several keys that verifies (a rotation in progress)', async (t) => {
  const a = pair()
  const b = pair()
  const msg = Buffer.from('req\nuser\n1\nabc')
  const keys = [new Ed25519Key(a.x), new Ed25519Key(b.x)]
  t.equal(await keyThatVerifies(keys, msg, b.sign(msg)), keys[1])
  t.equal(await keyThatVerifies(keys, msg, a.sign(msg)), keys[0])
  t.equal(await keyThatVerifies([keys[0]], msg, b.sign(msg)), null)
  t.equal(await keyThatVerifies([], msg, a.sign(msg)), null)
})

t.test('keyThatVerifies: the key that verified last is checked first, once', async (t) => {
  const a = pair()
  const b = pair()
  const msg = Buffer.from('req\nuser\n2\ndef')
  const keys = [new Ed25519Key(a.x), new Ed25519Key(b.x)]
  const checks = new Map<Ed25519Key, number>()
  for (const k of keys) {
    const verify = k.verify.bind(k)
    k.verify = (m, s) => { checks.set(k, (checks.get(k) ?? 0) + 1); return verify(m, s) }
  }
  // The new key, published last, signs: without a hint the old one is checked first.
  t.equal(await keyThatVerifies(keys, msg, b.sign(msg)), keys[1])
  t.same([checks.get(keys[0]), checks.get(keys[1])], [1, 1])
  checks.clear()
  t.equal(await keyThatVerifies(keys, msg, b.sign(msg), keys[1]), keys[1])
  t.same([checks.get(keys[0]), checks.get(keys[1])], [undefined, 1], 'one check')
  checks.clear()
  // The hint is wrong (the old key signed): every key is still tried, the hint once.
  t.equal(await keyThatVerifies(keys, msg, a.sign(msg), keys[1]), keys[0])
  t.same([checks.get(keys[0]), checks.get(keys[1])], [1, 1])
  checks.clear()
  // A hint that is not among the keys (the JWKS was fetched again) is not checked.
  const gone = new Ed25519Key(b.x)
  t.equal(await keyThatVerifies([keys[0]], msg, b.sign(msg), gone), null)
  t.same([checks.get(keys[0])], [1])
})
