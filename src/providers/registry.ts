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
import { Redis } from 'ioredis'
import { LEASE_MS } from '../db/jobs.js'
import { LocalCapacity, MAX_CAP_SLOTS, RedisCapacity, SharedCapacity, type CapacityStore, type CapSlot, type SharedProviderState } from './capacity.js'
import { Budget, budgetSlot, installBudgets, uninstallBudgets, LocalBudgetStore, RedisBudgetStore, SharedBudgetStore, type BudgetStore } from './budget.js'
import { PROVIDER_NAMES } from './routing.js'

/** How a thread counts capacity and budgets (shards get the node's shared memory; see capacity.ts). */
export interface ProvidersOptions {
  /** The node's shared memory (created by the main thread, handed to each shard). */
  shared?: SharedProviderState
  /** This thread's shard index (-1 or absent: not a shard; it takes no slots). */
  shard?: number
  log?: (msg: string, extra?: Record<string, unknown>) => void
}

/** A route with waiters asks its capacity store again this often (a slot freed on another shard or node wakes no one here). */
const RECHECK_MS = 100

/** The slots a route's jobs take: where they are counted and in which capacities. */
export interface RouteCapacity { store: CapacityStore; slots: CapSlot[] }

/**
 * One route of one model (routing file entry) as a shard runs it: its provider, its circuit
 * breaker and its capacity. A shard owns its own Route objects; their capacity (the route's
 * `max_concurrent` and its provider's) is counted across the node's shards and, with REDIS_URL,
 * across nodes (src/providers/capacity.ts, docs/providers.md "Capacity and budgets").
 */
export class Route {
  readonly breaker = new CircuitBreaker()
  /** Jobs of this shard the provider holds on this route (submitted, not terminal). */
  inFlight = 0
  /** Jobs waiting for room on this route, first come first served: each entry wakes one. */
  private readonly waiting: Array<{ id: string; wake: () => void }> = []
  private readonly capacity: RouteCapacity
  private recheck: NodeJS.Timeout | null = null

  constructor (
    /** `model#index:provider:upstream model`: stored with the job (jobs.route). */
    readonly key: string,
    readonly model: string,
    readonly spec: RouteSpec,
    readonly provider: RouteProvider,
    /** The route's max_concurrent (Infinity: no cap); used when `capacity` is not given. */
    readonly cap: number,
    /**
     * Keeps route, handle and upstream history with the job (sql/0008). False only for the
     * implicit simulated route of a model the routing file does not list: its handle is its id,
     * and the extra writes would cost every simulated job (bench job-create).
     */
    readonly recordsHistory = true,
    capacity?: RouteCapacity,
  ) {
    this.capacity = capacity ?? {
      store: new LocalCapacity(),
      slots: Number.isFinite(cap) ? [{ key: key, index: 0, cap }] : [],
    }
  }

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

  /**
   * Takes a slot for `jobId` when a submission of `job` may start now: the provider accepts it,
   * no earlier job waits here (first come, first served), and every capacity it counts in has
   * room (across shards and nodes). True: the job holds the slot until release(jobId).
   */
  async take (job: ProviderJob, jobId: string): Promise<boolean> {
    if (!this.provider.accepts(job)) return false
    if (this.waiting.length > 0 && this.waiting[0].id !== jobId) return false
    if (this.capacity.slots.length > 0 && !(await this.capacity.store.take(this.capacity.slots, jobId))) return false
    this.inFlight++
    this.unwait(jobId)
    return true
  }

  /** A job that already runs upstream holds a slot again (resume after a restart or on another node). */
  adopt (jobId: string): void {
    this.inFlight++
    if (this.capacity.slots.length > 0) this.capacity.store.adopt(this.capacity.slots, jobId)
  }

  /** The job's slot is free again (it ended, was refused, or moved). */
  release (jobId: string): void {
    if (this.inFlight > 0) this.inFlight--
    if (this.capacity.slots.length > 0) this.capacity.store.release(this.capacity.slots, jobId)
    this.wakeNext()
  }

  /** Queue a job for room; `wake` runs when room may have freed and it is first. */
  wait (id: string, wake: () => void): void {
    if (!this.waiting.some(w => w.id === id)) this.waiting.push({ id, wake })
    if (this.recheck === null && this.capacity.slots.length > 0) {
      this.recheck = setInterval(() => {
        if (this.waiting.length === 0) { clearInterval(this.recheck!); this.recheck = null; return }
        this.waiting[0].wake()
      }, RECHECK_MS)
      this.recheck.unref()
    }
  }

  /** Leave the queue (submitted, cancelled or gone). */
  unwait (id: string): void {
    const i = this.waiting.findIndex(w => w.id === id)
    if (i >= 0) this.waiting.splice(i, 1)
    if (i === 0) this.wakeNext()
  }

  private wakeNext (): void {
    if (this.waiting.length > 0) this.waiting[0].wake()
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
 * Routing from model id to providers is configuration (docs/architecture.md "Providers and media"): PROVIDERS_FILE lists
 * each model's routes in order; a model not listed (or every model, without the file) runs on
 * the simulated provider.
 */
export class Providers {
  private readonly byModel = new Map<string, Route[]>()
  private readonly byKey = new Map<string, Route>()
  private readonly byName = new Map<string, RouteProvider>()
  private readonly simRoutes = new Map<string, Route>()

  private readonly capacity: CapacityStore
  private readonly redis: Redis | null
  /** Next free index in shared memory for a route's capacity (after one per provider name). */
  private nextSlot = PROVIDER_NAMES.length

  private constructor (readonly table: RoutingTable | null, config: Config, opts: ProvidersOptions) {
    const log = opts.log ?? (() => {})
    const shard = opts.shard ?? -1
    const local: CapacityStore = opts.shared ? new SharedCapacity(opts.shared, shard) : new LocalCapacity()
    // Connected on first use only: threads that never take a slot or send a request open nothing.
    this.redis = config.redisUrl
      ? new Redis(config.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1, commandTimeout: 2000, enableOfflineQueue: true })
      : null
    this.redis?.on('error', () => {}) // reported by the failing calls
    this.capacity = this.redis ? new RedisCapacity(this.redis, config.redisPrefix, LEASE_MS, local, log) : local
    // Request budgets (docs/providers.md "Capacity and budgets"): only where every sender of
    // the node counts in one place (Redis, or the shared memory of the shards and main thread).
    const budgets: Budget[] = []
    for (const [name, s] of Object.entries(table?.providers ?? {})) {
      if (s.requests_per_second === undefined) continue
      let store: BudgetStore | null = null
      const owner = shard >= 0 ? shard + 1 : 0x7fff0000
      const fallback = opts.shared ? new SharedBudgetStore(opts.shared, budgetSlot(name), owner) : new LocalBudgetStore()
      if (this.redis) store = new RedisBudgetStore(this.redis, config.redisPrefix, name, fallback, log)
      else if (opts.shared) store = fallback
      if (store) budgets.push(new Budget(name, s.requests_per_second, s.burst, s.max_wait_ms, store))
    }
    installBudgets(budgets)
    this.budgets = budgets
  }

  private readonly budgets: Budget[]

  /** Loads the routing file and builds the adapters it needs. Throws a boot error on any mistake. */
  static async load (config: Config, storage: Storage, _shards = 1, opts: ProvidersOptions = {}): Promise<Providers> {
    const table = loadRouting(config.providersFile, config.providerEnv)
    // GET /v1/models in this thread shows what these routes can serve.
    useRouting(table)
    const p = new Providers(table, config, opts)
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
        const after = table?.providers?.[name]?.reconcile_after_s
        const adapter = createAdapter(name, config.providerEnv)
        p.byName.set(name, new AdapterProvider(adapter, takesCallbacks(name, config.providerEnv), after === undefined ? undefined : after * 1000))
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
    const cap = spec.max_concurrent ?? Infinity
    const index = this.nextSlot++
    if (index >= MAX_CAP_SLOTS) throw new Error(`PROVIDERS_FILE: more than ${MAX_CAP_SLOTS - PROVIDER_NAMES.length} routes`)
    const slots: CapSlot[] = spec.max_concurrent === undefined ? [] : [{ key: `route:${key}`, index, cap: spec.max_concurrent }]
    const capacity = { store: this.capacity, slots: [...slots, ...this.providerSlots(spec.provider)] }
    const r = new Route(key, model, spec, this.byName.get(spec.provider)!, cap, true, capacity)
    this.byKey.set(key, r)
    return r
  }

  /** The provider-wide cap (routing file `providers.<name>.max_concurrent`) as a slot, if set. */
  private providerSlots (provider: string): CapSlot[] {
    const cap = this.table?.providers?.[provider]?.max_concurrent
    if (cap === undefined) return []
    return [{ key: `provider:${provider}`, index: PROVIDER_NAMES.indexOf(provider as ProviderName), cap }]
  }

  /** Stops the Redis connection of this thread (if one was opened). */
  close (): void {
    if (this.capacity instanceof RedisCapacity) this.capacity.close()
    uninstallBudgets(this.budgets)
    this.redis?.disconnect()
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
    const capacity = { store: this.capacity, slots: this.providerSlots(p.name) }
    const r = new Route(k, model, { provider: p.name as ProviderName, model: 'unknown' }, p, Infinity, true, capacity)
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
