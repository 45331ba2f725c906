import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv'
import addFormatsModule from 'ajv-formats'
import type { TSchema } from '@sinclair/typebox'
import { ApiError } from '../errors.js'
import { issuesOf, validationError, type ValidationIssue } from '../catalog/validate.js'

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv

/** Bodies: no coercion. Queries arrive as strings, so their validator coerces. */
const bodyAjv = addFormats(new Ajv({ allErrors: true, strict: false }))
const queryAjv = addFormats(new Ajv({ allErrors: true, strict: false, coerceTypes: true, useDefaults: true }))

export function compileBody (schema: TSchema): ValidateFunction { return bodyAjv.compile(schema) }
export function compileQuery (schema: TSchema): ValidateFunction { return queryAjv.compile(schema) }

/** Ajv errors as docs/api.md "Errors" `details`: the catalogue's shape, shared by every route. */
export function toDetails (errors: ErrorObject[] | null | undefined): ValidationIssue[] {
  return issuesOf(errors ?? [])
}

export function check<T> (validate: ValidateFunction, value: unknown, where: 'body' | 'query'): T {
  if (!validate(value)) throw validationError(toDetails(validate.errors), where === 'body' ? 'Request body' : 'Query string')
  return value as T
}

/** Integer path parameters (keyId, webhook id): anything else is 400 INVALID_PARAM. */
export function intParam (value: string | undefined, name: string): number {
  if (value === undefined || !/^[1-9][0-9]{0,15}$/.test(value) || !Number.isSafeInteger(Number(value))) {
    throw new ApiError('INVALID_PARAM', `${name} must be a positive integer`, { param: name })
  }
  return Number(value)
}
