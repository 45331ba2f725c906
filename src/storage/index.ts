import { join } from 'node:path'
import type { Config } from '../config.js'
import { LocalStorage } from './local.js'
import type { Storage } from './storage.js'

/** Picks the storage driver from configuration (local filesystem by default). */
export async function createStorage (config: Config): Promise<Storage> {
  return new LocalStorage(join(config.dataDir, 'media'), config.publicBaseUrl)
}
