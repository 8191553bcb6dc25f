// node:perf_hooks for tests on virtual time (test/helpers/virtual-time.ts): `performance` is read
// from the global at each call, so the fake clock's `performance` is the one the engine sees. (The
// engine imports nothing else from node:perf_hooks.)
export const performance = {
  now: () => globalThis.performance.now(),
  get timeOrigin() {
    return globalThis.performance.timeOrigin;
  },
};
