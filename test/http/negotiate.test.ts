// Content negotiation (src/http/respond.ts negotiate, docs/api.md "TOON"): media types compared
// without regard to case, q-values honoured, only the exact type application/toon selects TOON.
import t from 'tap'
import { negotiate } from '../../src/http/respond.js'

t.test('TOON when application/toon is asked for, in any case and among others', async (t) => {
  for (const a of ['application/toon', 'Application/Toon', 'APPLICATION/TOON', ' application/toon ', 'application/toon; charset=utf-8',
    'application/json, application/toon', 'application/toon;q=0.9, text/html', 'text/plain, application/toon;q=1']) {
    t.equal(negotiate(a), 'toon', a)
  }
})

t.test('JSON otherwise: no Accept, refused TOON, JSON preferred, and types that only contain the name', async (t) => {
  for (const a of [undefined, '', '*/*', 'application/json', 'text/event-stream', 'application/toon;q=0', 'application/toon; q=0.0',
    'application/toonx', 'application/json;x=application/toon', 'application/toon;q=0.5, application/json', 'application/toon;q=0.4, */*;q=0.8',
    'application/toon;q=nonsense', 'text/toon']) {
    t.equal(negotiate(a), 'json', String(a))
  }
})

t.test('a tie between TOON and JSON goes to TOON (the client named it)', async (t) => {
  t.equal(negotiate('application/json;q=0.8, application/toon;q=0.8'), 'toon')
  t.equal(negotiate('*/*, application/toon'), 'toon')
})
