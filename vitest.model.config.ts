import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// npm run test:model: the model-based store contract (test/model), MODEL_RUNS sequences per store (10,000 unless
// set), the Sentinel and Cluster topologies included; then the engine's simulation (npm run test:sim). npm run
// test:live runs the same files with a few dozen sequences per store.
export default defineConfig({
  // #platform (package.json "imports"): from source, Node's primitives, as tsconfig.json's paths say.
  resolve: { alias: { '#platform': fileURLToPath(new URL('./src/core/platform/node.ts', import.meta.url)) } },
  test: {
    include: ['test/model/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 180_000,
    // Each file waits mostly on Redis and PostgreSQL round trips: two at a time on 2 cores.
    maxWorkers: 2,
  },
});
