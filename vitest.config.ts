import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// Two suites, one vitest project each (`npx vitest run <file>` runs a file of either):
// npm run test:unit (project unit): test/unit, one module at a time (the bench's own helpers too), no
// service: no Redis, no PostgreSQL, no network.
// npm run test:live (project live): the library against real Redis, PostgreSQL and MariaDB: test/stores (each
// store), test/engine (the engine on those stores), test/trpc (the adapter over HTTP), test/client (the
// client link), test/model (the model-based store contract, a few dozen sequences per store; npm run test:model
// runs 10,000), test/sim (the engine's simulation); every test file outside test/unit and the folders below.
// The example app's end-to-end suite, the fault suite and the stacks suite (with the CLI's tests) have
// configs of their own.
export default defineConfig({
  // #platform (package.json "imports"): from source, Node's primitives, as tsconfig.json's paths say.
  resolve: { alias: { '#platform': fileURLToPath(new URL('./src/core/platform/node.ts', import.meta.url)) } },
  test: {
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The files wait mostly on Redis, PostgreSQL, MariaDB, timers and child processes: with two at a time
    // the run kept 0.7 of 2 cores busy (248 s); four at a time take 142 s, with the same tests green.
    maxWorkers: 4,
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'] } },
      {
        extends: true,
        test: {
          name: 'live',
          include: ['test/**/*.test.ts'],
          exclude: [
            'test/unit/**',
            'test/e2e/**',
            'test/faults/**',
            'test/stacks/**',
            'test/cli/**',
            '**/node_modules/**',
          ],
        },
      },
    ],
  },
});
