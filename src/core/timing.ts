import { after } from './timer-list.js';

/** Rejects with `onTimeout()` if `promise` has not settled within `ms`. The timer is unref'd. */
export function withTimeout<T>(promise: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  // It runs on every store call: one promise and a shared timer (see
  // timer-list.ts), rather than a second promise, Promise.race and a finally step.
  return new Promise<T>((resolve, reject) => {
    const timer = after(ms, () => reject(onTimeout()));
    promise.then(
      (value) => {
        timer.stop();
        resolve(value);
      },
      (error: unknown) => {
        timer.stop();
        reject(error);
      },
    );
  });
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
