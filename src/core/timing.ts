/** Rejects with `onTimeout()` if `promise` has not settled within `ms`. The timer is unref'd. */
export function withTimeout<T>(promise: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), ms);
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Sleeps `ms`, or less if `wake` is called or `signal` aborts. Returns the
 * function that wakes it early.
 */
export function interruptibleSleep(ms: number, signal?: AbortSignal): { promise: Promise<void>; wake: () => void } {
  let wake!: () => void;
  const promise = new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    timer.unref();
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    wake = done;
    signal?.addEventListener('abort', done, { once: true });
  });
  return { promise, wake };
}
