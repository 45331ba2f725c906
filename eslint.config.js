// Lint: typescript-eslint's recommended rules without type information (fast on 2 cores), a
// line-length limit, no `any` in src/ (each remaining cast says why), and the import boundaries
// between the rooms of src/ (docs/architecture.md "Rooms"). `npm run lint`; `npm test` runs it first.
import tseslint from 'typescript-eslint'
import stylistic from '@stylistic/eslint-plugin'


/** What each room of src/ may not import (docs/architecture.md "Rooms"): a regex over the import path. */
const ROOMS = {
  // Data and pure functions: no I/O, no threads (src/net's address rules are pure; its clients are not).
  catalog: '(^|/)(db|http|shard|webhooks|threads|providers|storage|media)/|(^|/)net/(?!(ip|address-policy)\\.js$)',
  // SQL only: shared types come from src/domain.ts and src/jobs.
  db: '(^|/)(http|shard|webhooks|threads|providers|storage|net)/',
  // Infrastructure below everything: no room above it.
  net: '(^|/)(db|http|shard|webhooks|threads|providers|storage|catalog)/',
  threads: '(^|/)(db|http|shard|webhooks|providers|storage|catalog)/',
  // The front end asks the shards through their protocol and client, never their actors.
  http: '(^|/)shard/(?!(protocol|shard-pool|shard-client)\\.js$)',
  // The shard side never reaches into the front end or the webhook workers.
  shard: '(^|/)(http|webhooks)/',
  webhooks: '(^|/)(http|providers)/|(^|/)shard/(?!(group-commit)\\.js$)',
  providers: '(^|/)(http|shard|webhooks|threads)/',
  jobs: '(^|/)(db|http|shard|webhooks|threads|providers|net)/',
  // The local driver's writer thread uses src/threads' channel and lifecycle, as any thread does.
  storage: '(^|/)(http|shard|webhooks|providers)/',
}
const boundaries = Object.entries(ROOMS).map(([room, regex]) => ({
  files: [`src/${room}/**/*.ts`],
  rules: { 'no-restricted-imports': ['error', { patterns: [{ regex, message: `src/${room} may not import this room (docs/architecture.md "Rooms")` }] }] },
}))

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'data/**', 'test-output/**', 'dashboard/dist/**', 'bench/results/**'] },
  ...tseslint.configs.recommended,
  {
    plugins: { '@stylistic': stylistic },
    rules: {
      '@stylistic/max-len': ['error', { code: 160, ignoreStrings: true, ignoreTemplateLiterals: true, ignoreRegExpLiterals: true, ignoreUrls: true }],
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      'no-empty': ['error', { allowEmptyCatch: true }],
    },
  },
  { files: ['src/**/*.ts'], rules: { '@typescript-eslint/no-explicit-any': 'error' } },
  ...boundaries,
)
