import { AsyncContext } from '#platform';
import type { IdempotencyEventHandler } from './events.js';
import {
  checkBoolean,
  checkFunction,
  checkOneOf,
  checkPositiveMs,
  checkTimerMs,
  checkWholeNumber,
  configError,
} from './options.js';
import type { IdempotencyStore } from './store.js';

/** What happens to a request that finds its key held by a request still running. */
export type InFlightPolicy = 'reject' | 'wait';
/** What happens when the store fails or times out. */
export type StoreErrorPolicy = 'fail-closed' | 'fail-open';

/** The options that can be set for the whole engine and overridden per operation. */
export interface IdempotencyPolicyOptions {
  /**
   * How long a finished outcome is kept and replayed, in milliseconds.
   * @default 86_400_000 (24 hours, as Stripe)
   */
  ttl?: number;
  /**
   * How long a claim lives without renewal, in milliseconds. A crashed holder
   * blocks its key for at most this long. It is renewed every `lockTtl / 3`
   * while the operation runs, so it need not exceed the operation's duration;
   * a failed renewal is sent again `storeTimeout` after it was sent, so k
   * renewals lost in a row are survived when
   * `lockTtl / 3 + k × storeTimeout + network delay < lockTtl`.
   * At most 2^31 - 1 (a Node.js timer's limit), and at least 3 x `storeTimeout`.
   * @default 30_000
   */
  lockTtl?: number;
  /**
   * `reject`: a request that finds its key in flight gets 409 at once.
   * `wait`: it waits up to `waitTimeout` for the first request's outcome and
   * replays it (or gets 409 if it is still running).
   * @default 'reject'
   */
  inFlight?: InFlightPolicy;
  /**
   * How long a request waits in `inFlight: 'wait'` mode, in milliseconds.
   * @default 10_000
   */
  waitTimeout?: number;
  /**
   * `fail-closed`: if the store fails, the request is refused with 503 and the
   * operation does not run. `fail-open`: it runs unprotected and an event is emitted.
   * @default 'fail-closed'
   */
  onStoreError?: StoreErrorPolicy;
  /**
   * The largest serialized outcome stored, in bytes. A larger one is not
   * stored: its caller still gets it, a marker is stored, and retries get
   * `response_too_large` (it never runs again for that key). In transactional
   * mode the transaction rolls back and the key is released instead.
   * @default 1_048_576 (1 MiB)
   */
  maxResponseBytes?: number;
  /**
   * Field names left out of the fingerprint at any depth, for values that
   * change between retries without changing the operation (timestamps, nonces).
   * Names, not paths: `'requestId'` leaves out every field of that name.
   * @default []
   */
  excludeFields?: readonly string[];
  /**
   * Run the operation inside a store transaction (stores that have one: the
   * Drizzle store) and store the outcome in that same transaction, so the
   * operation's own database writes and its stored outcome commit together.
   * @default false
   */
  transaction?: boolean;
  /**
   * The longest an operation keeps its claim, in milliseconds. Past it the
   * claim is no longer renewed (it expires lockTtl later, so a retry can run)
   * and the operation's signal aborts. Unset: renewed for as long as it runs.
   * @default undefined (no limit)
   */
  maxRunTime?: number;
}

/** Defaults of {@link IdempotencyPolicyOptions}, exported for reuse. */
export const DEFAULT_POLICY = Object.freeze({
  ttl: 24 * 60 * 60 * 1000,
  lockTtl: 30_000,
  inFlight: 'reject' as InFlightPolicy,
  waitTimeout: 10_000,
  onStoreError: 'fail-closed' as StoreErrorPolicy,
  maxResponseBytes: 1024 * 1024,
  excludeFields: Object.freeze([]) as readonly string[],
  transaction: false,
});

/** A validated policy with every default applied. */
export interface ResolvedPolicy {
  readonly ttl: number;
  readonly lockTtl: number;
  /** The store timeout of this policy's calls: the engine's, or by default at most lockTtl / 3. */
  readonly storeTimeout: number;
  readonly inFlight: InFlightPolicy;
  readonly waitTimeout: number;
  readonly onStoreError: StoreErrorPolicy;
  readonly maxResponseBytes: number;
  readonly exclude: ReadonlySet<string> | undefined;
  readonly transaction: boolean;
  readonly maxRunTime: number | undefined;
}

/** The default `storeTimeout`, in ms, lowered to lockTtl / 3 for a shorter lockTtl. */
export const DEFAULT_STORE_TIMEOUT = 1_000;

/**
 * Merges `overrides` over `base` and validates the result. Throws
 * {@link IdempotencyConfigError} with what to change; it runs when the engine
 * or a procedure is created, never per request.
 */
export function resolvePolicy(
  base: IdempotencyPolicyOptions & { storeTimeout?: number | undefined },
  overrides: IdempotencyPolicyOptions = {},
  where = 'idempotency options',
): ResolvedPolicy {
  const pick = <K extends keyof typeof DEFAULT_POLICY>(k: K) =>
    (overrides[k] ?? base[k] ?? DEFAULT_POLICY[k]) as NonNullable<IdempotencyPolicyOptions[K]>;
  const ttl = pick('ttl');
  const lockTtl = pick('lockTtl');
  const inFlight = pick('inFlight');
  const waitTimeout = pick('waitTimeout');
  const onStoreError = pick('onStoreError');
  const maxResponseBytes = pick('maxResponseBytes');
  const excludeFields = pick('excludeFields');
  const transaction = pick('transaction');
  const maxRunTime = overrides.maxRunTime ?? base.maxRunTime;
  if (maxRunTime !== undefined) checkTimerMs(maxRunTime, 'maxRunTime', where);
  checkPositiveMs(ttl, 'ttl', where);
  checkTimerMs(lockTtl, 'lockTtl', where);
  const storeTimeout = base.storeTimeout ?? Math.min(DEFAULT_STORE_TIMEOUT, Math.max(Math.floor(lockTtl / 3), 1));
  checkTimerMs(storeTimeout, 'storeTimeout', where);
  if (storeTimeout > lockTtl / 3) {
    throw configError(
      where,
      `storeTimeout (${storeTimeout} ms) is more than a third of lockTtl (${lockTtl} ms). The claim is renewed every lockTtl / 3, ` +
        'and a renewal lost on the way must time out early enough for the next one to reach the store before the claim expires. Raise lockTtl or lower storeTimeout.',
    );
  }
  if (lockTtl > ttl) {
    throw configError(
      where,
      `lockTtl (${lockTtl} ms) is longer than ttl (${ttl} ms). A claim must not outlive the stored outcome; lower lockTtl or raise ttl.`,
    );
  }
  checkOneOf(inFlight, 'inFlight', where, ['reject', 'wait']);
  checkTimerMs(waitTimeout, 'waitTimeout', where, { allowZero: true });
  checkOneOf(onStoreError, 'onStoreError', where, ['fail-closed', 'fail-open']);
  checkWholeNumber(maxResponseBytes, 'maxResponseBytes', where, { min: 1, unit: ' of bytes' });
  if (!Array.isArray(excludeFields) || excludeFields.some((f) => typeof f !== 'string' || f === '')) {
    throw configError(where, 'excludeFields must be an array of field names (non-empty strings).');
  }
  const path = excludeFields.find((f) => f.includes('.'));
  if (path !== undefined) {
    const leaf = path.slice(path.lastIndexOf('.') + 1);
    throw configError(
      where,
      `excludeFields takes field names, each left out at any depth, not paths: ${JSON.stringify(path)} would exclude nothing. ` +
        `Write ${JSON.stringify(leaf)} to leave out every field of that name.`,
    );
  }
  checkBoolean(transaction, 'transaction', where);
  return Object.freeze({
    transaction,
    maxRunTime,
    ttl,
    lockTtl,
    storeTimeout,
    inFlight,
    waitTimeout,
    onStoreError,
    maxResponseBytes,
    exclude: excludeFields.length > 0 ? new Set(excludeFields) : undefined,
  });
}

/**
 * The engine's own fields of `IdempotencyEngineOptions`, named here because types.ts builds on this file
 * (its options extend {@link IdempotencyPolicyOptions}) and must stay above it.
 */
interface EngineOwnOptions {
  store: IdempotencyStore;
  now?: () => number;
  storeTimeout?: number;
  retryAfter?: number;
  onEvent?: IdempotencyEventHandler;
}

/** The engine's own options (the policy's are checked by {@link resolvePolicy}), with their defaults. */
export function checkEngineOptions(options: EngineOwnOptions) {
  const where = 'idempotency options';
  const { store, now = Date.now, retryAfter = 1, onEvent } = options;
  checkStore(store);
  checkFunction(now, 'now', where, 'a function that returns the time in ms');
  if (options.storeTimeout !== undefined) checkTimerMs(options.storeTimeout, 'storeTimeout', where);
  checkWholeNumber(retryAfter, 'retryAfter', where, { unit: ' of seconds' });
  if (onEvent !== undefined) checkFunction(onEvent, 'onEvent', where, 'a function that takes an event');
  return { store, now: now as () => number, retryAfter, onEvent };
}

export function checkTransaction(policy: ResolvedPolicy, store: IdempotencyStore, where: string): void {
  if (policy.transaction && store.transaction === undefined) {
    throw configError(
      where,
      'transaction: true needs a store with transactions (the Drizzle store); this store has none.',
    );
  }
  // The store finds the run's transaction through AsyncLocalStorage (protected-run.ts): without one it could not.
  if (policy.transaction && AsyncContext === undefined) {
    throw configError(
      where,
      'transaction: true needs AsyncLocalStorage, which this runtime does not have. ' +
        'On Cloudflare Workers, enable the nodejs_compat compatibility flag.',
    );
  }
}

/** A store is an object with the four atomic operations; anything else fails here, not per request. */
function checkStore(store: unknown): asserts store is IdempotencyStore {
  const missing = ['claim', 'complete', 'release', 'extend'].filter(
    (method) => typeof (store as Record<string, unknown> | null)?.[method] !== 'function',
  );
  if (missing.length > 0) {
    throw configError(
      'idempotency options',
      `store must implement the IdempotencyStore interface (claim, complete, release, extend); it has no ${missing.join(', ')}. ` +
        'Pass memoryStore(), redisStore({ client }) or drizzleStore({ db }).',
    );
  }
}
