import type { Config } from '../config.js'
import type { Storage } from '../storage/storage.js'
import { AdapterProvider, createAdapter, takesCallbacks } from './adapters.js'
import { CircuitBreaker } from './circuit-breaker.js'
import type { ProviderJob, RouteProvider } from './provider.js'
import { loadRouting, type ProviderName, type RouteSpec, type RoutingTable } from './routing.js'
import { SimulatedProvider } from './simulated.js'
import { schemaOfRoute, unserved, type Unserved } from './capabilities.js'
import type { UpstreamSchema } from './upstream-schemas.js'
import { useRouting } from './served-catalog.js'
import { trackBreaker } from '../worker-stats.js'

/**
 * One route of one model (routing file entry) as a shard runs it: its provider, its circuit
 * breaker and its capacity. A shard owns its own Route objects; the cap of a route is shared
 * out between the shards of a node (ceil(max_concurrent / shards) each; docs/decisions.md).
 */
export class Route {
  readonly breaker = new CircuitBreaker()
  /** Jobs of this shard the provider holds on this route (submitted, not terminal). */
  inFlight = 0
  /** Jobs waiting for room on this route, first come first served: each entry wakes one. */
  private readonly waiting: Array<{ id: string; wake: () => void }> = []

  constructor (
    /** `model#index:provider:upstream model`: stored with the job (jobs.route). */
    readonly key: string,
    readonly model: string,
    readonly spec: RouteSpec,
    readonly provider: RouteProvider,
    /** This shard's share of max_concurrent (Infinity: no cap). */
    readonly cap: number,
    /**
     * Keeps route, handle and upstream history with the job (sql/0008). False only for the
     * implicit simulated route of a model the routing file does not list: its handle is its id,
     * and the extra writes would cost every simulated job (bench job-create).
     */
    readonly recordsHistory = true,
  ) {}

  private schema: UpstreamSchema | null | undefined

  /**
   * Why this route cannot serve `request` ([] = it can): an option it would drop or a value its
   * upstream schema refuses (src/providers/capabilities.ts). Simulated routes serve everything.
   */
  unserved (request: Record<string, unknown>, prompt: string | null): Unserved[] {
    if (this.spec.provider === 'simulated') return []
    if (this.schema === undefined) this.schema = schemaOfRoute(this.spec)
    return unserved(this.spec, this.schema, this.model, request, prompt ?? (typeof request.prompt === 'string' ? request.prompt : null))
  }

  /** The route's upstream schema (null: simulated, or a route the boot check never saw). */
  upstreamSchema (): UpstreamSchema | null {
    if (this.spec.provider === 'simulated') return null
    if (this.schema === undefined) this.schema = schemaOfRoute(this.spec)
    return this.schema
  }

  /** True when a submission of `job` may start now (room on the route, the provider accepts it). */
  hasRoom (job: ProviderJob, jobId?: string): boolean {
    if (!this.provider.accepts(job)) return false
    if (this.inFlight >= this.cap) return false
    // First come, first served: a job behind others waiting for room waits for its turn.
    if (this.waiting.length > 0 && this.waiting[0].id !== jobId) return false
    return true
  }

  /** Queue a job for room; `wake` runs when room frees and it is first. */
  wait (id: string, wake: () => void): void {
    if (!this.waiting.some(w => w.id === id)) this.waiting.push({ id, wake })
  }

  /** Leave the queue (submitted, cancelled or gone). */
  unwait (id: string): void {
    const i = this.waiting.findIndex(w => w.id === id)
    if (i >= 0) this.waiting.splice(i, 1)
    if (i === 0) this.wakeNext()
  }

  acquire (): void { this.inFlight++ }

  release (): void {
    if (this.inFlight > 0) this.inFlight--
    this.wakeNext()
  }

  private wakeNext (): void {
    if (this.waiting.length > 0 && this.inFlight < this.cap) this.waiting[0].wake()
  }

  get queued (): number { return this.waiting.length }

  /** The route's state for GET /v1/health. */
  state (): RouteState {
    return {
      model: this.model,
      route: this.key,
      provider: this.provider.name,
      upstream_model: this.spec.model,
      breaker: this.breaker.open ? 'open' : 'closed',
      in_flight: this.inFlight,
      queued: this.waiting.length,
      max_concurrent: this.spec.max_concurrent ?? null,
    }
  }
}

export interface RouteState {
  model: string
  route: string
  provider: string
  upstream_model: string
  breaker: 'open' | 'closed'
  in_flight: number
  queued: number
  max_concurrent: number | null
}

/**
 * Routing from model id to providers is configuration (DESIGN.md 5 and 7): PROVIDERS_FILE lists
 * each model's routes in order; a model not listed (or every model, without the file) runs on
 * the simulated provider.
 */
export class Providers {
  private readonly byModel = new Map<string, Route[]>()
  private readonly byKey = new Map<string, Route>()
  private readonly byName = new Map<string, RouteProvider>()
  private readonly simRoutes = new Map<string, Route>()

  private constructor (readonly table: RoutingTable | null, private readonly shards: number) {}

  /** Loads the routing file and builds the adapters it needs. Throws a boot error on any mistake. */
  static async load (config: Config, storage: Storage, shards = 1): Promise<Providers> {
    const table = loadRouting(config.providersFile, config.providerEnv)
    // GET /v1/models in this thread shows what these routes can serve.
    useRouting(table)
    const p = new Providers(table, shards)
    p.byName.set('simulated', new SimulatedProvider(storage, config.simSpeed))
    const needed = new Set<ProviderName>()
    for (const list of Object.values(table?.routes ?? {})) for (const r of list) needed.add(r.provider)
    // A provider with its credential set also answers callbacks (and resumes jobs) even when no
    // route names it any more.
    if (config.providerEnv.FAL_KEY) needed.add('fal')
    if (config.providerEnv.REPLICATE_API_TOKEN) needed.add('replicate')
    if (config.providerEnv.KIE_API_KEY) needed.add('kie')
    for (const name of needed) {
      if (name === 'simulated') continue
      try {
        p.byName.set(name, new AdapterProvider(createAdapter(name, config.providerEnv), takesCallbacks(name, config.providerEnv)))
      } catch (err) {
        throw new Error(`provider ${name}: the adapter could not be loaded: ${(err as Error).message}`)
      }
    }
    for (const [model, list] of Object.entries(table?.routes ?? {})) {
      p.byModel.set(model, list.map((spec, i) => p.addRoute(model, i, spec)))
    }
    // Metrics (genjobs_provider_breaker_state{provider}): the worst breaker of the provider's routes.
    for (const name of p.byName.keys()) trackBreaker(name, () => p.worstBreaker(name))
    return p
  }

  private addRoute (model: string, i: number, spec: RouteSpec): Route {
    const key = `${model}#${i}:${spec.provider}:${spec.model}`
    const cap = spec.max_concurrent === undefined ? Infinity : Math.max(1, Math.ceil(spec.max_concurrent / this.shards))
    const r = new Route(key, model, spec, this.byName.get(spec.provider)!, cap)
    this.byKey.set(key, r)
    return r
  }

  /** The ordered routes of a model. */
  routesFor (model: string): Route[] {
    const list = this.byModel.get(model)
    if (list) return list
    let r = this.simRoutes.get(model)
    if (!r) {
      r = new Route(`${model}#sim:simulated:simulated`, model, { provider: 'simulated', model: 'simulated' }, this.byName.get('simulated')!, Infinity, false)
      this.simRoutes.set(model, r)
      this.byKey.set(r.key, r)
    }
    return [r]
  }

  /**
   * The route a stored job ran on (jobs.route). The routing file may have changed since: then
   * a route of the same provider for the model, else a capless route on that provider.
   */
  routeOf (model: string, key: string | null, provider: string): Route {
    if (key) { const r = this.byKey.get(key); if (r) return r }
    const same = this.routesFor(model).find(r => r.provider.name === provider)
    if (same) return same
    const p = this.byName.get(provider) ?? this.byName.get('simulated')!
    const k = key ?? `${model}#gone:${p.name}:unknown`
    const r = new Route(k, model, { provider: p.name as ProviderName, model: 'unknown' }, p, Infinity)
    this.byKey.set(k, r)
    return r
  }

  private worstBreaker (provider: string): number {
    let worst = 0
    for (const r of this.byKey.values()) if (r.provider.name === provider) worst = Math.max(worst, r.breaker.state)
    return worst
  }

  /** A provider by name (callbacks), or undefined when not configured. */
  provider (name: string): RouteProvider | undefined { return this.byName.get(name) }

  /** Every configured route (health). */
  states (): RouteState[] {
    const out: RouteState[] = []
    for (const list of this.byModel.values()) for (const r of list) out.push(r.state())
    return out
  }
}
