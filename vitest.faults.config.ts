import { defineConfig } from 'vitest/config';

// npm run test:faults: faults injected into Redis and PostgreSQL servers the tests start themselves,
// load, Redis Cluster, hostile input and security.
export default defineConfig({
  test: {
    include: ['test/faults/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 120_000,
    // One file at a time (vitest's default on 2 cores, said here): two at a time halved the suite's
    // wall time, but a failover test's cluster, started in the background, once failed to come up
    // beside another file's servers.
    maxWorkers: 1,
  },
});
