import { randomBytes } from 'node:crypto'

/** A new job id: `job_` + 96 random bits in base64url (SPEC.md 2.1: prefix `job_`). */
export function newJobId (): string {
  return `job_${randomBytes(12).toString('base64url')}`
}
