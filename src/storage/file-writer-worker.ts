import { closeSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from 'node:fs'
import { dirname } from 'node:path'
import { parentPort } from 'node:worker_threads'
import { ApiError } from '../errors.js'
import { Channel } from '../threads/channel.js'
import type { FromWriter, ToWriter } from './file-writer-protocol.js'

/**
 * The file-writer thread (src/storage/file-writer.ts): each put as four plain system calls
 * (open, write, close, rename) on this thread, so a small object costs its caller one message
 * instead of four thread-pool round trips (docs/decisions.md "Small objects written by a writer
 * thread").
 */
function writeAll (tmp: string, bytes: Uint8Array): void {
  const fd = openSync(tmp, 'wx')
  try {
    let done = 0
    while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done)
  } finally {
    closeSync(fd)
  }
}

function put (tmp: string, path: string, bytes: Uint8Array): null {
  try {
    try { writeAll(tmp, bytes) } catch (err) {
      // A directory not made yet (or removed behind our back): made, then one more try.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
      mkdirSync(dirname(tmp), { recursive: true })
      writeAll(tmp, bytes)
    }
    renameSync(tmp, path)
    return null
  } catch (err) {
    rmSync(tmp, { force: true })
    throw err
  }
}

const port = parentPort!
const channel = new Channel<FromWriter, ToWriter>(port, {
  peer: 'main',
  handlers: {
    put: async ({ tmp, path, bytes }) => put(tmp, path, bytes),
  },
  failure: (err) => {
    const e = err as NodeJS.ErrnoException
    return new ApiError('INTERNAL_ERROR', `storage write failed: ${e.code ?? ''} ${e.message ?? String(err)}`.trim(), { details: { errno_code: e.code ?? null } })
  },
})
port.on('message', (b) => channel.receive(b))
channel.tell('ready', {})
