import { defineConfig } from 'vitest/config';

// npm run test:faults: faults injected into Redis and PostgreSQL servers the tests start themselves,
// load, Redis Cluster, hostile input and security.
export default defineConfig({
  test: {
    include: ['test/faults/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 120_000,
  },
});
