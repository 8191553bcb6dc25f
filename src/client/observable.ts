import type { Observable, Observer, Unsubscribable } from '@trpc/server/observable';

/**
 * A minimal observable with tRPC's shape, for the links of this entry. tRPC's
 * own `observable()` lives in `@trpc/server`, which the browser entry must not
 * load at run time; only its types are used here.
 *
 * `start` runs once per subscriber and returns its teardown. The teardown runs
 * exactly once: on `unsubscribe()`, or right after `error` or `complete` (even
 * when those are called synchronously, before `start` has returned).
 */
export function createObservable<TValue, TError>(
  start: (observer: Observer<TValue, TError>) => () => void,
): Observable<TValue, TError> {
  const self = {
    subscribe(subscriber: Partial<Observer<TValue, TError>>): Unsubscribable {
      let stopped = false;
      let teardown: (() => void) | undefined;
      let tornDown = false;
      const runTeardown = () => {
        if (tornDown || teardown === undefined) return;
        tornDown = true;
        teardown();
      };
      const end = (notify: () => void) => {
        if (stopped) return;
        stopped = true;
        try {
          notify();
        } finally {
          runTeardown();
        }
      };
      const observer: Observer<TValue, TError> = {
        next: (value) => {
          if (!stopped) subscriber.next?.(value);
        },
        error: (error) => end(() => subscriber.error?.(error)),
        complete: () => end(() => subscriber.complete?.()),
      };
      try {
        teardown = start(observer);
      } catch (cause) {
        observer.error(cause as TError);
      }
      if (stopped) runTeardown();
      return {
        unsubscribe() {
          stopped = true;
          runTeardown();
        },
      };
    },
    pipe(...operators: Array<(source: unknown) => unknown>): unknown {
      return operators.reduce<unknown>((source, operator) => operator(source), self);
    },
  };
  return self as unknown as Observable<TValue, TError>;
}
