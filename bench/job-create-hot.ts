/**
 * `job-create-hot`: the same creations as `job-create`, all on ONE account (one AccountActor,
 * one row). The one-transaction-per-request baseline serialises on that row's lock; the
 * service's group commit charges the batch in one transaction. Target: req/s >= 5x baseline.
 */
import { createScenario } from './job-create.js'

export const scenario = createScenario('job-create-hot', 1, 5)
