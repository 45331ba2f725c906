/** The parts of autocannon 8's programmatic API the benchmarks use (it ships no types). */
declare module 'autocannon' {
  export interface Request {
    method?: string
    path?: string
    headers?: Record<string, string>
    body?: string | Buffer
  }
  export interface Histogram {
    average: number; mean: number; stddev: number; min: number; max: number; p50: number; p90: number; p97_5: number; p99: number; p99_9: number
    totalCount?: number; sent?: number
  }
  export interface Result {
    duration: number
    errors: number
    timeouts: number
    non2xx: number
    resets: number
    '1xx': number
    '2xx': number
    '3xx': number
    '4xx': number
    '5xx': number
    statusCodeStats: Record<string, { count: number }>
    latency: Histogram
    requests: Histogram
    throughput: Histogram
  }
  export interface Client { setRequests (r: Request[]): void }
  export interface Options extends Request {
    url: string
    connections?: number
    duration?: number
    amount?: number
    /** Requests per second in total, over every connection. */
    overallRate?: number
    pipelining?: number
    timeout?: number
    requests?: Request[]
    setupClient?: (client: Client) => void
    excludeErrorStats?: boolean
  }
  function autocannon (opts: Options): Promise<Result> & { stop (): void }
  export default autocannon
}
