import t from 'tap'
t.test('tap runs compiled tests', async (t) => { t.equal(1 + 1, 2) })
