import { fileURLToPath } from 'node:url'
import { defineConfig } from 'vite'

// The developer dashboard (issue 14): `vite build dashboard` (part of `npm run build`) writes
// dist/dashboard, which src/http/routes/dashboard.ts serves at /dashboard. Everything is bundled:
// the page works offline (no CDN).
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/dashboard/',
  logLevel: 'warn',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: {
    outDir: fileURLToPath(new URL('../dist/dashboard', import.meta.url)),
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    chunkSizeWarningLimit: 400,
  },
  // `npx vite dashboard` for development: the API of a local `npm start`.
  server: { proxy: { '/v1': 'http://127.0.0.1:8080', '/files': 'http://127.0.0.1:8080' } },
})
