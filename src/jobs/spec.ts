import type { NormalizedRequest } from '../catalog/validate.js'
import type { JobOrder, JobSpec } from '../domain.js'

/**
 * The text a provider reads directives from (docs/architecture.md "Providers and media"): the prompt, and for audio
 * also text, style and lyrics. Derived from the stored request, so a resumed job sees the same.
 */
export function directiveTextOf (request: Record<string, unknown>, prompt: string | null): string {
  const parts = [prompt, request.prompt, request.text, request.style, request.lyrics, request.title]
  return parts.filter((p): p is string => typeof p === 'string').join('\n')
}

/** A validated request as the shard's job spec. `type` extend carries its source job. */
export function specOf (n: NormalizedRequest, sourceModel?: string): JobSpec {
  const request = n as unknown as Record<string, unknown>
  const prompt = n.prompt ?? null
  if (n.kind === 'extend') {
    return { type: 'extend', model: sourceModel!, prompt, credits: n.credits, estimated_seconds: n.estimated_seconds, request, directiveText: directiveTextOf(request, prompt), source_job_id: n.job_id }
  }
  return {
    type: n.kind, model: n.model, prompt, credits: n.credits, estimated_seconds: n.estimated_seconds, request,
    directiveText: directiveTextOf(request, prompt)
  }
}

/** What crosses to the shard: the spec without the copies of the prompt. */
export function orderOf (spec: JobSpec): JobOrder {
  const { prompt: _p, directiveText: _d, ...order } = spec
  return order
}

/** The shard's side: prompt and directive text derived from the request again. */
export function specOfOrder (o: JobOrder): JobSpec {
  const prompt = typeof o.request.prompt === 'string' ? o.request.prompt : null
  return { ...o, prompt, directiveText: directiveTextOf(o.request, prompt) }
}
