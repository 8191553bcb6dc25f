import type { Attempt } from './attempt.js';
import { realClock } from './clock.js';
import { describeError, type IdempotencyEvent } from './events.js';
import { IdempotencyError, storeFailure } from './idempotency-error.js';
import type {
  ClaimResult,
  CompleteInput,
  CompleteResult,
  IdempotencyStore,
  SaveStepInput,
  SaveStepResult,
  StoreTransaction,
} from './store.js';
import { StoreClock } from './store-clock.js';
import { type ClockTimers, timersOf, withTimeout } from './timing.js';

/** A claim's answer the engine acts on: a late one is retried or thrown here. */
export type Answer = Exclude<ClaimResult, { state: 'late' }>;

type Operation = NonNullable<IdempotencyEvent['operation']>;

/** Options of one guarded operation. */
interface CallOptions<T> {
  /** Leave reporting a failure to the caller (a completion retried in the background reports once, at the end). */
  quiet?: boolean;
  /** Receives the store's own promise: for a caller that counts answers landing after it gave up. */
  sent?: (pending: Promise<T>) => void;
  /** Called with the store's answer if it lands after the operation timed out. */
  late?: (value: T) => void;
}

/**
 * The store as the engine uses it, and the only way core reaches it. Every
 * operation is bounded by `storeTimeout` (a store that does not answer counts
 * as unavailable) and reports its own failure as a `store_error` event;
 * every claim carries a deadline in the store's own clock, so a claim that
 * reaches the store after the engine gave up on it takes nothing.
 */
export interface GuardedStore {
  /** The store's name, for messages. */
  readonly name: string;
  readonly savesSteps: boolean;
  /**
   * Claims the attempt's key (`waiting`: the caller will wait for a holder).
   * `quiet`: the caller answers a failure as something else, and reports that.
   */
  claim(attempt: Attempt, waiting: boolean, quiet?: boolean): Promise<Answer>;
  complete(attempt: Attempt, input: CompleteInput, options?: CallOptions<CompleteResult>): Promise<CompleteResult>;
  /** Gives the key back; false when the attempt no longer held it. */
  release(attempt: Attempt): Promise<boolean>;
  /** Renews the attempt's claim; false when it no longer holds it. `quiet`: the caller reported a failure of this run already. */
  extend(attempt: Attempt, quiet?: boolean): Promise<boolean>;
  /** Only where {@link savesSteps}. */
  saveStep(attempt: Attempt, input: SaveStepInput): Promise<SaveStepResult>;
  /** Listens for the key to settle (see IdempotencyStore.onSettled), or undefined where the store cannot notify. */
  subscribe(attempt: Attempt, listener: (notifying?: boolean) => void): Promise<(() => void) | undefined>;
  /** Only where the store has transactions (checked when the policy is resolved). */
  transaction<T>(fn: (tx: StoreTransaction) => Promise<T>): Promise<T>;
  /** {@link complete} inside the store's transaction. */
  completeIn(tx: StoreTransaction, attempt: Attempt, input: CompleteInput): Promise<CompleteResult>;
}

const noop = () => {};
const QUIET = Object.freeze({ quiet: true });

/** Starts a store call; a synchronous throw becomes a rejection. */
function start<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (error) {
    return Promise.reject(error);
  }
}

export function guardStore(
  store: IdempotencyStore,
  emit: (event: IdempotencyEvent) => void,
  timers: ClockTimers = timersOf(realClock),
): GuardedStore {
  const { clock, timeouts } = timers;
  // What the engine knows of the store's clock, to put deadlines on claims.
  const storeClock = new StoreClock();

  function timeoutError(operation: Operation, timeout: number): Error {
    return storeFailure(
      'unavailable',
      new IdempotencyError(
        'store_unavailable',
        `The idempotency store did not answer ${operation} within ${timeout} ms.`,
      ),
    );
  }

  function report(attempt: Attempt, operation: Operation, error: unknown, started: number): void {
    emit({
      result: 'store_error',
      name: attempt.name,
      keyHash: attempt.keyHash,
      durationMs: clock.now() - started,
      operation,
      error: describeError(error),
    });
  }

  /** One store operation: timed, and its failure reported unless `quiet`. */
  async function guarded<T>(
    operation: Operation,
    attempt: Attempt,
    send: () => Promise<T>,
    options: CallOptions<T> = {},
  ): Promise<T> {
    const timeout = attempt.policy.storeTimeout;
    const started = clock.now();
    const pending = start(send);
    options.sent?.(pending);
    try {
      return await withTimeout(pending, timeout, () => timeoutError(operation, timeout), started, timeouts);
    } catch (error) {
      if (options.late !== undefined) pending.then(options.late, noop);
      if (options.quiet !== true) report(attempt, operation, error, started);
      throw error;
    }
  }

  /**
   * One claim, with a deadline in the store's clock: if it reaches the store
   * after this engine gave up on it (it waited in a driver's queue through an
   * outage), the store changes nothing and it can never take the key from a
   * holder whose completion is on its way.
   */
  async function claim(attempt: Attempt, waiting: boolean, quiet = false): Promise<Answer> {
    const { id, token, policy } = attempt;
    for (let tries = 1; ; tries++) {
      const sent = clock.now();
      attempt.claimSentAt = sent;
      const sentAt = clock.timeOrigin + sent; // the engine's time (store-clock.ts), and the timeout's start
      const deadline = storeClock.deadline(sentAt, policy.storeTimeout);
      const input = { id, fingerprint: attempt.fp, token, lockTtl: policy.lockTtl, waiting, deadline };
      const result = await guarded('claim', attempt, () => store.claim(input), {
        quiet,
        // A claim that lands after we gave up (a store without deadlines, or one
        // answered just in time) must not keep the key for lockTtl: give it back.
        late: (answer) => {
          if (answer.state === 'acquired' || answer.state === 'late')
            start(() => store.release({ id, token })).catch(noop);
        },
      });
      if (result.time !== undefined) storeClock.observe(sentAt, result.time);
      if (result.state !== 'late') return result;
      // Answered in time, but the store's clock is ahead of what we knew of it:
      // this answer taught us by how much, so the claim is sent once more.
      if (tries === 2) {
        const error = storeFailure(
          'unavailable',
          new IdempotencyError(
            'store_unavailable',
            'The idempotency store answered the claim as late twice: its clock jumps ahead of this process.',
          ),
        );
        if (!quiet) report(attempt, 'claim', error, sent);
        throw error;
      }
    }
  }

  return {
    name: store.name ?? 'custom',
    savesSteps: store.saveStep !== undefined,
    claim,
    complete: (attempt, input, options) => guarded('complete', attempt, () => store.complete(input), options),
    release: (attempt) => guarded('release', attempt, () => store.release({ id: attempt.id, token: attempt.token })),
    extend: (attempt, quiet) =>
      guarded(
        'extend',
        attempt,
        () =>
          store.extend({
            id: attempt.id,
            token: attempt.token,
            lockTtl: attempt.policy.lockTtl,
            fingerprint: attempt.fp,
          }),
        quiet === true ? QUIET : undefined,
      ),
    saveStep: (attempt, input) => guarded('save_step', attempt, () => store.saveStep!(input)),
    async subscribe(attempt, listener) {
      if (store.onSettled === undefined) return undefined;
      return guarded('subscribe', attempt, () => store.onSettled!(attempt.id, listener), {
        // A subscription that lands after we gave up must not leak its listener.
        late: (unsubscribe) => unsubscribe(),
      });
    },
    transaction: (fn) => store.transaction!(fn),
    completeIn: (tx, attempt, input) => guarded('complete', attempt, () => tx.complete(input)),
  };
}
