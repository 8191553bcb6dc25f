import { performance } from 'node:perf_hooks';
import type { Call } from './call.js';
import { IdempotencyError, storeFailure } from './errors.js';
import type { IdempotencyEvent } from './events.js';
import type { ClaimResult, IdempotencyStore } from './store.js';
import { StoreClock } from './store-clock.js';
import { withTimeout } from './timing.js';

/** A claim's answer the engine acts on: a late one is retried or thrown here. */
export type Answer = Exclude<ClaimResult, { state: 'late' }>;

type Operation = NonNullable<IdempotencyEvent['operation']>;

/**
 * The store as the engine uses it: every call bounded by a timeout (a store
 * that does not answer counts as unavailable), and every claim bounded by a
 * deadline in the store's own clock, so a claim that reaches the store after
 * the engine gave up on it takes nothing.
 */
export interface GuardedStore {
  readonly raw: IdempotencyStore;
  /** One store call, failing with `store_unavailable` after `timeout` ms. */
  call<T>(operation: Operation, timeout: number, fn: () => Promise<T>): Promise<T>;
  /** Claims `call`'s key once (`waiting`: the caller will wait for a holder). */
  claim(call: Call, waiting: boolean): Promise<Answer>;
  /** The error of a call that did not answer in time. */
  timedOut(operation: Operation, timeout: number): Error;
}

const noop = () => {};

/** Starts a store call; a synchronous throw becomes a rejection. */
export function start<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (error) {
    return Promise.reject(error);
  }
}

export function guardStore(store: IdempotencyStore): GuardedStore {
  // What the engine knows of the store's clock, to put deadlines on claims.
  const clock = new StoreClock();

  function timedOut(operation: Operation, timeout: number): Error {
    return storeFailure(
      'unavailable',
      new IdempotencyError(
        'store_unavailable',
        `The idempotency store did not answer ${operation} within ${timeout} ms.`,
      ),
    );
  }

  function call<T>(operation: Operation, timeout: number, fn: () => Promise<T>): Promise<T> {
    return withTimeout(start(fn), timeout, () => timedOut(operation, timeout));
  }

  /**
   * One claim, with a deadline in the store's clock: if it reaches the store
   * after this engine gave up on it (it waited in a driver's queue through an
   * outage), the store changes nothing and it can never take the key from a
   * holder whose completion is on its way.
   */
  async function claim(c: Call, waiting: boolean): Promise<Answer> {
    const { id, token, policy } = c;
    const timeout = policy.storeTimeout;
    for (let attempt = 1; ; attempt++) {
      const sent = performance.now();
      const sentAt = performance.timeOrigin + sent; // engineTime(), and the timeout's start
      const deadline = clock.deadline(sentAt, timeout);
      const pending = start(() =>
        store.claim({ id, fingerprint: c.fp, token, lockTtl: policy.lockTtl, waiting, deadline }),
      );
      let result: ClaimResult;
      try {
        result = await withTimeout(pending, timeout, () => timedOut('claim', timeout), sent);
      } catch (error) {
        // A claim that lands after we gave up (a store without deadlines, or one
        // answered just in time) must not keep the key for lockTtl: give it back.
        pending.then(
          (late) => (late.state === 'acquired' || late.state === 'late') && store.release({ id, token }).catch(noop),
          noop,
        );
        throw error;
      }
      if (result.time !== undefined) clock.observe(sentAt, result.time);
      if (result.state !== 'late') return result;
      // Answered in time, but the store's clock is ahead of what we knew of it:
      // this answer taught us by how much, so the claim is sent once more.
      if (attempt === 2) {
        throw storeFailure(
          'unavailable',
          new IdempotencyError(
            'store_unavailable',
            'The idempotency store answered the claim as late twice: its clock jumps ahead of this process.',
          ),
        );
      }
    }
  }

  return { raw: store, call, claim, timedOut };
}
