/**
 * The file-writer boundary (docs/architecture.md "Messages between threads"): what a
 * LocalStorage asks its writer thread (`ToWriter`) and what the thread sends back
 * (`FromWriter`), on a src/threads/channel.ts Channel.
 */
export interface ToWriter {
  asks: {
    /**
     * Writes `bytes` (header and content, one buffer moved to the writer) to `tmp`, created
     * exclusively, then renames it to `path`; the directory is made when missing. A failed write
     * removes `tmp`.
     */
    put: { req: { tmp: string; path: string; bytes: Uint8Array }; res: null }
  }
  tells: Record<never, never>
}

export interface FromWriter {
  asks: Record<never, never>
  tells: { ready: Record<never, never> }
}
