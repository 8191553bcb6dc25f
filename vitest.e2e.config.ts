import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// npm run test:e2e: the example app, as separate processes, over HTTP and in a browser.
export default defineConfig({
  // #platform (package.json "imports"): from source, Node's primitives, as tsconfig.json's paths say.
  resolve: { alias: { '#platform': fileURLToPath(new URL('./src/core/platform/node.ts', import.meta.url)) } },
  test: {
    include: ['test/e2e/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Two files at a time: they wait on instances, a card provider and a browser, each on a port the
    // kernel gave (PORT=0), with a PostgreSQL schema and a Redis prefix of their own.
    maxWorkers: 2,
  },
});
