/**
 * Figures read from the service's own GET /metrics (Prometheus text, admin token): the group
 * commit's transactions and the items they carried (genjobs_group_commit_batch_size, summed
 * over every shard and the delivery worker), and PostgreSQL's commit counter of a database.
 */
import type postgres from 'postgres'
import type { ServiceProcess } from './children.js'

export interface CommitTotals { commits: number; items: number }

export async function groupCommitTotals (svc: ServiceProcess): Promise<CommitTotals> {
  const r = await fetch(`${svc.url}/metrics`, { headers: { authorization: `Bearer ${svc.adminToken}` } })
  const text = await r.text()
  const sum = (name: string) => {
    let n = 0
    for (const line of text.split('\n')) {
      if (!line.startsWith(name)) continue
      const rest = line.slice(name.length)
      if (rest[0] !== ' ' && rest[0] !== '{') continue
      n += Number(line.slice(line.lastIndexOf(' ') + 1)) || 0
    }
    return n
  }
  return { commits: sum('genjobs_group_commit_batch_size_count'), items: sum('genjobs_group_commit_batch_size_sum') }
}

/** Transactions committed in the connected database so far (pg_stat_database.xact_commit; read-only ones count too). */
export async function xactCommits (sql: postgres.Sql): Promise<number> {
  return Number((await sql<{ n: string }[]>`SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = current_database()`)[0].n)
}
