/** Baseline: Fastify 5 hello-world (no auth, no lookup), the usual Node framework floor. */
import Fastify from 'fastify'

const app = Fastify({ logger: false })
app.get('/', async () => ({ hello: 'world' }))
await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT) })
process.on('SIGTERM', () => { app.close().then(() => process.exit(0)) })
process.send!({ type: 'ready' })
