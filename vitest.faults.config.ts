import { defineConfig } from 'vitest/config';

// npm run test:faults: faults injected into Redis and PostgreSQL servers the tests start themselves,
// load, Redis Cluster, hostile input and security.
export default defineConfig({
  test: {
    include: ['test/faults/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 120_000,
    // Vitest's default on 2 cores is one file at a time. Most of these files wait (on a restart, a
    // failover, a lockTtl) rather than compute: two at a time halve the suite's wall time.
    maxWorkers: 2,
  },
});
