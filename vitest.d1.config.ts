import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// npm run test:workers:d1: the Drizzle SQLite store on Cloudflare D1 inside workerd (test/stacks/workers/d1.suite.ts),
// with the stacks suite's packed library. Apart from the stacks run: it installs miniflare 3 and its own workerd.
export default defineConfig({
  resolve: { alias: { '#platform': fileURLToPath(new URL('./src/core/platform/node.ts', import.meta.url)) } },
  test: {
    include: ['test/stacks/workers/d1.suite.ts'],
    testTimeout: 120_000,
    hookTimeout: 600_000,
    globalSetup: ['test/stacks/global-setup.ts'],
  },
});
