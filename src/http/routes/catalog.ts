/**
 * Public discovery routes of the catalogue (docs/api.md "Endpoints"): GET /v1/models and
 * GET /v1/credits/pricing. Both bodies are built once (src/catalog/responses.ts) and returned
 * by identity with a strong ETag, so the front end serialises them once and answers
 * If-None-Match with 304.
 */
import { PRICING_ETAG, pricingResponse } from '../../catalog/index.js'
import { servedModels } from '../../providers/served-catalog.js'
import { ModelsResponse, PricingResponse } from '../../catalog/schemas.js'
import type { Route } from '../route.js'

/** Prices change only with a deploy; a minute of client caching costs nothing and ETags revalidate. */
const CACHE_CONTROL = 'public, max-age=60'

export const routes: Route[] = [
  {
    method: 'GET',
    path: '/v1/models',
    auth: 'public',
    summary: 'Model catalogue: every model with its options, price descriptor and estimated time',
    tag: 'Discovery',
    schema: { response: { 200: ModelsResponse } },
    // A fresh Reply each time (the front end may add headers); the body is always the same object.
    // With PROVIDERS_FILE it lists only the option values some route serves
    // (src/providers/served-catalog.ts, set when this thread loaded its routes, before the
    // server reads `constant`).
    handler: () => { const m = servedModels(); return { body: m.body, etag: m.etag, headers: { 'Cache-Control': CACHE_CONTROL } } },
    get constant () { const m = servedModels(); return { body: m.body, etag: m.etag, headers: { 'Cache-Control': CACHE_CONTROL } } },
  },
  {
    method: 'GET',
    path: '/v1/credits/pricing',
    auth: 'public',
    summary: 'Full price table in credits, the credit packs (USD, INR) and the free trial',
    tag: 'Discovery',
    schema: { response: { 200: PricingResponse } },
    handler: () => ({ body: pricingResponse, etag: PRICING_ETAG, headers: { 'Cache-Control': CACHE_CONTROL } }),
    constant: { body: pricingResponse, etag: PRICING_ETAG, headers: { 'Cache-Control': CACHE_CONTROL } },
  },
]
