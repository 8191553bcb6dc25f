import { defineConfig } from 'vitest/config';

// npm run test:unit: test/unit (one module at a time; the bench's own helpers too), test/stores (each store against real Redis and PostgreSQL),
// test/engine (the engine on those stores), test/trpc (the adapter over HTTP), test/client (the client link),
// test/model (the model-based store contract, a few dozen sequences per store; npm run test:model runs 10,000).
// The example app's end-to-end suite, the fault suite and the stacks suite (with the CLI's tests) have configs of their own.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // test/model/topologies.test.ts starts a Redis Cluster and a Sentinel set: npm run test:model runs it.
    exclude: [
      'test/e2e/**',
      'test/faults/**',
      'test/stacks/**',
      'test/cli/**',
      'test/model/topologies.test.ts',
      '**/node_modules/**',
    ],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The files wait mostly on Redis, PostgreSQL, timers and child processes: two at a time on 2 cores
    // (vitest's default there is one).
    maxWorkers: 2,
  },
});
