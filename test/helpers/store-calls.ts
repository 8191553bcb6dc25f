/**
 * A store whose calls a test can watch: what each claim answered, and when every call made so far
 * (a give-back an engine sends on its own, after the caller had its answer) has settled. The calls
 * go to the real store unchanged (a getter, such as a memory store's `size`, is read once, when it is made).
 */
import type { ClaimInput, ClaimResult, IdempotencyStore } from '../../src/core.js';

export interface WatchedStore<S extends IdempotencyStore> {
  /** `inner` with its claim, complete, release, extend and saveStep calls watched. */
  store: S;
  /** Every claim answered so far, in the order the answers came. */
  claims: { input: ClaimInput; answer: ClaimResult }[];
  /** Resolves once every call made so far, and every call made meanwhile, has settled. */
  settled(): Promise<void>;
}

export function watchedStore<S extends IdempotencyStore>(inner: S): WatchedStore<S> {
  const pending = new Set<Promise<unknown>>();
  const claims: WatchedStore<S>['claims'] = [];
  const watch = <I, O>(call: (input: I) => Promise<O>, onAnswer?: (input: I, answer: O) => void) => {
    return (input: I): Promise<O> => {
      const answered = call(input).then((answer) => {
        onAnswer?.(input, answer);
        return answer;
      });
      const done = answered.then(
        () => {},
        () => {},
      );
      pending.add(done);
      void done.then(() => pending.delete(done));
      return answered;
    };
  };
  const store: S = {
    ...inner,
    claim: watch(
      (input: ClaimInput) => inner.claim(input),
      (input, answer) => claims.push({ input, answer }),
    ),
    complete: watch((input: Parameters<S['complete']>[0]) => inner.complete(input)),
    release: watch((input: Parameters<S['release']>[0]) => inner.release(input)),
    extend: watch((input: Parameters<S['extend']>[0]) => inner.extend(input)),
    ...(inner.saveStep === undefined ? {} : { saveStep: watch(inner.saveStep.bind(inner)) }),
  };
  return {
    store,
    claims,
    async settled() {
      // A call that settles can lead to another (a late claim's answer to its give-back), made once the
      // engine's promise callbacks ran: after each round, let them run (one turn of the event loop) and look again.
      do {
        await Promise.all([...pending]);
        await new Promise((resolve) => setImmediate(resolve));
      } while (pending.size > 0);
    },
  };
}
