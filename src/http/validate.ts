import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv'
import addFormatsModule from 'ajv-formats'
import type { TSchema } from '@sinclair/typebox'
import { ApiError } from '../errors.js'

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv

/** Bodies: no coercion. Queries arrive as strings, so their validator coerces. */
const bodyAjv = addFormats(new Ajv({ allErrors: true, strict: false }))
const queryAjv = addFormats(new Ajv({ allErrors: true, strict: false, coerceTypes: true, useDefaults: true }))

export function compileBody (schema: TSchema): ValidateFunction { return bodyAjv.compile(schema) }
export function compileQuery (schema: TSchema): ValidateFunction { return queryAjv.compile(schema) }

/** Ajv errors as SPEC.md 7 `details`: one `{path, message}` per problem. */
export function toDetails (errors: ErrorObject[] | null | undefined): Array<{ path: string; message: string }> {
  return (errors ?? []).map(e => {
    let path = e.instancePath || ''
    if (e.keyword === 'required') path += `/${(e.params as { missingProperty: string }).missingProperty}`
    if (e.keyword === 'additionalProperties') path += `/${(e.params as { additionalProperty: string }).additionalProperty}`
    return { path: path || '/', message: e.message ?? 'is invalid' }
  })
}

export function check<T> (validate: ValidateFunction, value: unknown, where: 'body' | 'query'): T {
  if (!validate(value)) {
    throw new ApiError('VALIDATION_ERROR', `Request ${where} failed validation`, { details: toDetails(validate.errors) })
  }
  return value as T
}

/** Integer path parameters (keyId, webhook id): anything else is 400 INVALID_PARAM. */
export function intParam (value: string | undefined, name: string): number {
  if (value === undefined || !/^[1-9][0-9]{0,15}$/.test(value) || !Number.isSafeInteger(Number(value))) {
    throw new ApiError('INVALID_PARAM', `${name} must be a positive integer`, { param: name })
  }
  return Number(value)
}
