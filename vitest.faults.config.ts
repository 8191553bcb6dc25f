import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// npm run test:faults: faults injected into Redis, PostgreSQL and MariaDB servers the tests start themselves,
// load, Redis Cluster, hostile input and security.
export default defineConfig({
  // #platform (package.json "imports"): from source, Node's primitives, as tsconfig.json's paths say.
  resolve: { alias: { '#platform': fileURLToPath(new URL('./src/core/platform/node.ts', import.meta.url)) } },
  test: {
    include: ['test/faults/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 120_000,
    // Two files at a time (vitest's default on 2 cores is one): the files wait mostly on restarts,
    // failovers and lock TTLs, and two halve the suite's wall time. Safe since the servers they start
    // take their ports from test/helpers/ports.ts: below the kernel's ephemeral range and reserved
    // across processes by lock files. Ports the kernel picked (listen(0), then closed) could be taken
    // by the other file's listeners or outgoing connections before the server bound them, and a
    // Cluster node that could not bind its port exited ("Connection is closed" in the failover test).
    // Starts that still fail are tried again on new ports.
    maxWorkers: 2,
  },
});
