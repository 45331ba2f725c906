/**
 * The catalogue module (docs/architecture.md "Rooms": data and pure functions, no I/O): model data,
 * prices, request schemas and validation, URL policy, and the frozen public bodies of
 * GET /v1/models and GET /v1/credits/pricing. Routes, the OpenAPI description and the job
 * service import from here.
 */
export * from './models.js'
export * from './pricing.js'
export * from './schemas.js'
export * from './url.js'
export * from './validate.js'
export { MODELS_ETAG, modelsResponse, PRICING_ETAG, PRICING_VERSION, pricingResponse, etagOf, pricingVersion, stableStringify } from './responses.js'
