/**
 * What an IP address is (docs/architecture.md "Address policy"): strict parsers for IPv4 and
 * IPv6 literals and ONE table of special-purpose ranges that both decides whether an address is
 * public and names why it is not. Pure; src/net/address-policy.ts builds the rules on top.
 */

/** Why an address is not public, for error messages and tests. `public` when it is. */
export type AddressKind =
  | 'public' | 'unspecified' | 'loopback' | 'private' | 'link-local' | 'metadata' | 'cgnat'
  | 'unique-local' | 'multicast' | 'reserved' | 'invalid'

/**
 * Parses a strict dotted-quad IPv4 address (what resolvers and the WHATWG URL parser emit)
 * into an unsigned 32-bit number, or null. Leading zeros are refused: their meaning (octal or
 * decimal) differs between parsers, so they are never taken as an address.
 */
export function parseIPv4 (s: string): number | null {
  const parts = s.split('.')
  if (parts.length !== 4) return null
  let n = 0
  for (const p of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p)) return null
    const v = Number(p)
    if (v > 255) return null
    n = n * 256 + v
  }
  return n
}

/**
 * Parses an IPv6 address (optional brackets, optional `%zone`, optional dotted IPv4 tail) into
 * its 16 bytes, or null.
 */
export function parseIPv6 (input: string): number[] | null {
  let s = input
  if (s.startsWith('[') && s.endsWith(']')) s = s.slice(1, -1)
  const zone = s.indexOf('%')
  if (zone >= 0) s = s.slice(0, zone)
  if (!s.includes(':')) return null
  // A dotted IPv4 tail (::ffff:1.2.3.4) becomes two hex groups.
  const lastColon = s.lastIndexOf(':')
  const last = s.slice(lastColon + 1)
  if (last.includes('.')) {
    const v4 = parseIPv4(last)
    if (v4 === null) return null
    s = s.slice(0, lastColon + 1) + (v4 >>> 16).toString(16) + ':' + (v4 & 0xffff).toString(16)
  }
  const halves = s.split('::')
  if (halves.length > 2) return null
  const groups = (h: string): number[] | null => {
    if (h === '') return []
    const out: number[] = []
    for (const g of h.split(':')) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null
      out.push(parseInt(g, 16))
    }
    return out
  }
  const head = groups(halves[0])
  if (head === null) return null
  let all: number[]
  if (halves.length === 2) {
    const tail = groups(halves[1])
    if (tail === null || head.length + tail.length > 7) return null
    all = [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail]
  } else {
    if (head.length !== 8) return null
    all = head
  }
  const bytes: number[] = []
  for (const g of all) bytes.push(g >> 8, g & 0xff)
  return bytes
}

/**
 * IPv4 ranges that are not publicly routable (RFC 6890 special-purpose registry), each with the
 * name given in refusals. The first match names an address, so the metadata /32 comes before the
 * link-local /16 that holds it.
 */
const IPV4_NON_PUBLIC: ReadonlyArray<readonly [string, number, AddressKind]> = [
  ['169.254.169.254', 32, 'metadata'], // the cloud metadata service
  ['0.0.0.0', 8, 'unspecified'], // "this network"
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'cgnat'], // carrier-grade NAT
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'reserved'], // IETF protocol assignments
  ['192.0.2.0', 24, 'reserved'], // TEST-NET-1
  ['192.88.99.0', 24, 'reserved'], // deprecated 6to4 relay anycast
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'reserved'], // benchmarking
  ['198.51.100.0', 24, 'reserved'], // TEST-NET-2
  ['203.0.113.0', 24, 'reserved'], // TEST-NET-3
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved'], // reserved, includes the 255.255.255.255 broadcast
]
const IPV4_NON_PUBLIC_NUM = IPV4_NON_PUBLIC.map(([base, bits, kind]) => {
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0
  return [((parseIPv4(base) as number) & mask) >>> 0, mask, kind] as const
})

function v4Kind (n: number): AddressKind {
  for (const [base, mask, kind] of IPV4_NON_PUBLIC_NUM) if (((n & mask) >>> 0) === base) return kind
  return 'public'
}

function v4At (b: number[], i: number): number {
  return ((b[i] << 24) >>> 0) + (b[i + 1] << 16) + (b[i + 2] << 8) + b[i + 3]
}

/**
 * IPv6 is judged by allow-list: only global unicast 2000::/3 can be public, minus the
 * documentation and IETF-assignment blocks; forms that embed an IPv4 address (mapped, NAT64,
 * 6to4) are public only when the embedded address is. Everything else, including ::, ::1,
 * fc00::/7 (ULA), fe80::/10 (link-local) and ff00::/8 (multicast), is non-public.
 * fd00:ec2::254 (the AWS IPv6 metadata address) is named `metadata`.
 */
function v6Kind (b: number[]): AddressKind {
  const zeros = (from: number, to: number): boolean => b.slice(from, to).every(x => x === 0)
  const embedded = (i: number): AddressKind => v4Kind(v4At(b, i)) === 'public' ? 'public' : 'reserved'
  // ::ffff:a.b.c.d (IPv4-mapped) is named as the IPv4 address it carries.
  if (zeros(0, 10) && b[10] === 0xff && b[11] === 0xff) return v4Kind(v4At(b, 12))
  // 64:ff9b::a.b.c.d (well-known NAT64 prefix)
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zeros(4, 12)) return embedded(12)
  if ((b[0] & 0xe0) !== 0x20) { // outside 2000::/3
    if (zeros(0, 16)) return 'unspecified'
    if (zeros(0, 15) && b[15] === 1) return 'loopback'
    if (b[0] === 0xfd && b[1] === 0x00 && b[2] === 0x0e && b[3] === 0xc2 && zeros(4, 14) && b[14] === 0x02 && b[15] === 0x54) return 'metadata'
    if ((b[0] & 0xfe) === 0xfc) return 'unique-local'
    if (b[0] === 0xfe && (b[1] & 0xc0) === 0x80) return 'link-local'
    if (b[0] === 0xff) return 'multicast'
    return 'reserved'
  }
  // 2002::/16 (6to4) carries an IPv4 address in bytes 2..5
  if (b[0] === 0x20 && b[1] === 0x02) return embedded(2)
  // 2001::/23 IETF protocol assignments (Teredo, ORCHID, benchmarking...)
  if (b[0] === 0x20 && b[1] === 0x01 && (b[2] & 0xfe) === 0x00) return 'reserved'
  // 2001:db8::/32 documentation
  if (b[0] === 0x20 && b[1] === 0x01 && b[2] === 0x0d && b[3] === 0xb8) return 'reserved'
  // 3fff::/20 documentation (RFC 9637)
  if (b[0] === 0x3f && b[1] === 0xff && (b[2] & 0xf0) === 0x00) return 'reserved'
  return 'public'
}

/** Classifies a literal or resolved address (brackets and a zone allowed); `invalid` when it is not an IP address. */
export function addressKind (address: string): AddressKind {
  const v4 = parseIPv4(address)
  if (v4 !== null) return v4Kind(v4)
  const v6 = parseIPv6(address)
  return v6 === null ? 'invalid' : v6Kind(v6)
}

/**
 * True when `s` is an IPv4 or IPv6 literal (brackets optional) in a public range. False for
 * non-public literals AND for anything that is not an IP literal, so a caller checking resolved
 * addresses refuses by default.
 */
export function isPublicIpLiteral (s: string): boolean {
  return addressKind(s) === 'public'
}

/** True when `s` is an IPv4 or IPv6 literal at all. */
export function isIpLiteral (s: string): boolean {
  return parseIPv4(s) !== null || parseIPv6(s) !== null
}
