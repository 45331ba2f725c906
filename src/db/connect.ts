import postgres from 'postgres'

export type Sql = postgres.Sql<Record<string, never>>
/** A transaction handle (inside `sql.begin`). */
export type Tx = postgres.TransactionSql<Record<string, never>>
/** Either: query functions take this so they run inside or outside a transaction. */
export type Q = Sql | Tx

/**
 * One postgres.js pool. bigint columns come back as numbers: credit balances and ids stay far
 * below 2^53. Notices are silenced (migrations emit them).
 */
export function connect (url: string, opts: { max?: number } = {}): Sql {
  return postgres(url, {
    max: opts.max ?? 10,
    onnotice: () => {},
    idle_timeout: 30,
    connect_timeout: 5,
    types: {
      bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) },
    },
  }) as unknown as Sql
}

/** `SELECT 1`: the health probe's round trip. */
export async function ping (sql: Q): Promise<void> {
  await sql`SELECT 1`
}
