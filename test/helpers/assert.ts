/** Asserts a docs/api.md "Errors" error envelope with the expected status and code. */
export function assertError (t: any, res: { status: number; body: any }, status: number, code: string, msg = ''): void {
  t.equal(res.status, status, `${msg} HTTP ${status}`.trim())
  t.equal(res.body?.error, true, 'envelope error: true')
  t.equal(res.body?.code, code, `code ${code}`)
  t.type(res.body?.message, 'string', 'envelope message')
}
