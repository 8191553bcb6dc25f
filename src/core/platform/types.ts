// What ./node.ts and ./web.ts both provide: the few primitives the engine takes from its runtime.
// package.json's "imports" maps `#platform` to one of them by export condition (see node.ts).

/** The part of AsyncLocalStorage the engine uses (protected-run.ts). */
export interface RunStorage<T> {
  getStore(): T | undefined;
  run<R>(store: T, fn: () => R): R;
  exit<R>(fn: () => R): R;
}

/** The part of AsyncResource the engine uses (timing.ts). */
export interface AsyncScope {
  runInAsyncScope<A extends unknown[], R>(fn: (...args: A) => R, thisArg: unknown, ...args: A): R;
}
