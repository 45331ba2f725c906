import { createPublicKey, verify as cryptoVerify, type KeyObject } from 'node:crypto'
import { createRequire } from 'node:module'

/**
 * Ed25519 public keys that check provider callback signatures (fal's webhooks; docs/providers.md
 * "Callbacks"). libsodium's check (the prebuilt `sodium-native` addon) costs ~60 µs of CPU a
 * signature on the bench machine against ~127 µs for OpenSSL's through node:crypto, and runs on
 * the calling thread, so a callback also saves the thread-pool round trip node:crypto's
 * asynchronous check takes (docs/decisions.md "Callback signatures checked with libsodium").
 * Where the addon cannot load (a platform without a prebuilt binary), node:crypto checks in
 * libuv's thread pool instead: the same answers, slower.
 */

interface Sodium {
  crypto_sign_verify_detached (sig: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean
}

function loadSodium (): Sodium | null {
  try {
    const s = createRequire(import.meta.url)('sodium-native') as Partial<Sodium>
    return typeof s.crypto_sign_verify_detached === 'function' ? s as Sodium : null
  } catch { return null }
}

const sodium = loadSodium()

/** Which implementation checks signatures in this process (operators and tests read it). */
export type Ed25519Implementation = 'libsodium' | 'node:crypto'
export const ed25519Implementation: Ed25519Implementation = sodium ? 'libsodium' : 'node:crypto'

const PUBLIC_KEY_BYTES = 32
const SIGNATURE_BYTES = 64

export class Ed25519Key {
  private readonly raw: Buffer
  private readonly key: KeyObject
  private readonly sodium: Sodium | null

  /**
   * `x`: the key's 32 bytes, base64url (a JWK's `x`). Throws on anything that is not an Ed25519
   * public key. `implementation`: this process's (the default), or node:crypto's (tests).
   */
  constructor (x: string, implementation: Ed25519Implementation = ed25519Implementation) {
    this.sodium = implementation === 'libsodium' ? sodium : null
    // node:crypto validates the key (and is the fallback's key object).
    this.key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x }, format: 'jwk' })
    this.raw = Buffer.from(x, 'base64url')
    if (this.raw.length !== PUBLIC_KEY_BYTES) throw new Error('an Ed25519 public key is 32 bytes')
  }

  /** Whether `sig` is this key's signature of `message`; a malformed signature does not verify. */
  verify (message: Buffer, sig: Buffer): boolean | Promise<boolean> {
    if (sig.length !== SIGNATURE_BYTES) return false
    if (this.sodium) {
      try { return this.sodium.crypto_sign_verify_detached(sig, message, this.raw) } catch { return false }
    }
    return new Promise<boolean>((resolve) => {
      cryptoVerify(null, message, this.key, sig, (err, valid) => resolve(!err && valid === true))
    })
  }
}

/**
 * The one of `keys` that verifies `sig` over `message`, or null. `first` (the key that verified
 * the previous signature) is tried before the others: while a rotation publishes old and new
 * keys, a signature costs one check, not one per key tried before its own.
 */
export async function keyThatVerifies (keys: readonly Ed25519Key[], message: Buffer, sig: Buffer, first: Ed25519Key | null = null): Promise<Ed25519Key | null> {
  if (first !== null && keys.includes(first) && await first.verify(message, sig)) return first
  for (const k of keys) if (k !== first && await k.verify(message, sig)) return k
  return null
}
