import { defineConfig } from 'vitest/config';

// npm run test:unit: the library against real Redis and PostgreSQL (and the bench's own helpers, test/bench-tools.test.ts).
// The example app's end-to-end suite, the fault suite and the stacks suite have configs of their own.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: ['test/e2e/**', 'test/faults/**', 'test/stacks/**', '**/node_modules/**'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
