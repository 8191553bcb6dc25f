import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// Builds the checkout page into web/dist, which the server serves.
// Inside this repository the library is the package itself: point its client
// entry at the build, as node_modules/trpc-idempotency would in your project.
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  logLevel: 'warn',
  resolve: {
    alias: { 'trpc-idempotency/client': fileURLToPath(new URL('../../dist/client.js', import.meta.url)) },
  },
  build: { outDir: 'dist', emptyOutDir: true },
});
