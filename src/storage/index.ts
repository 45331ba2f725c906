import { join } from 'node:path'
import type { Config } from '../config.js'
import { LocalStorage } from './local.js'
import type { Storage } from './storage.js'

/**
 * The configuration a storage driver needs: plain data, so the main thread can hand it to
 * worker threads (workerData) and each thread builds its own driver with `createStorage`.
 */
export type StorageConfig = Pick<Config, 'dataDir' | 'publicBaseUrl' | 'storageDriver' | 's3'>

/** The storage part of a Config, as a structured-clone-safe object. */
export function storageConfig (config: StorageConfig): StorageConfig {
  return { dataDir: config.dataDir, publicBaseUrl: config.publicBaseUrl, storageDriver: config.storageDriver, s3: { ...config.s3 } }
}

/**
 * Picks the storage driver from configuration (STORAGE_DRIVER; local filesystem by default).
 * The S3 SDK is loaded only when it is used.
 */
export async function createStorage (config: StorageConfig): Promise<Storage> {
  if (config.storageDriver === 's3') {
    const { S3Storage } = await import('./s3.js')
    return new S3Storage(config.s3, config.publicBaseUrl, join(config.dataDir, 'tmp'))
  }
  return new LocalStorage(join(config.dataDir, 'media'), config.publicBaseUrl)
}
