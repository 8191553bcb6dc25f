import { defineConfig } from 'vitest/config';

// npm run test:e2e: the example app, as separate processes, over HTTP and in a browser.
export default defineConfig({
  test: {
    include: ['test/e2e/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    fileParallelism: false,
  },
});
