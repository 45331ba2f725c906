import type { Config } from '../config.js'
import type { Storage } from '../storage/storage.js'
import { CircuitBreaker } from './circuit-breaker.js'
import type { Provider } from './provider.js'
import { SimulatedProvider } from './simulated.js'
import { trackBreaker } from '../worker-stats.js'

export interface ProviderEntry { provider: Provider; breaker: CircuitBreaker }

/**
 * Routing from model id to provider is configuration, not code (DESIGN.md section 5):
 * PROVIDER_ROUTES is a JSON object `{ "<model id>": "<provider>", "*": "<provider>" }`.
 * The simulated provider is the only one built in so far; naming another is a boot error.
 */
export class Providers {
  private readonly byName = new Map<string, ProviderEntry>()
  private readonly routes: Record<string, string>

  constructor (config: Config, storage: Storage) {
    this.byName.set('simulated', { provider: new SimulatedProvider(storage, config.simSpeed), breaker: new CircuitBreaker() })
    for (const [name, e] of this.byName) trackBreaker(name, () => e.breaker.state) // metrics
    this.routes = { '*': 'simulated', ...config.providerRoutes }
    for (const [model, name] of Object.entries(this.routes)) {
      if (!this.byName.has(name)) throw new Error(`PROVIDER_ROUTES: model ${model} names unknown provider ${name} (available: ${[...this.byName.keys()].join(', ')})`)
    }
  }

  forModel (model: string): ProviderEntry {
    return this.byName.get(this.routes[model] ?? this.routes['*'])!
  }
}
