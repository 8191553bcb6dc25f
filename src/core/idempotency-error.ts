/**
 * The error family of trpc-idempotency.
 *
 * Every error carries a stable, machine-readable `reason`. They are recognised
 * by a global symbol rather than only by `instanceof`, because an application
 * can end up with two copies of this package (a monorepo, a bundled
 * dependency), and an `instanceof` check across copies is always false.
 * They are converted to `TRPCError` codes at the tRPC boundary and nowhere else.
 */

const brand = Symbol.for('trpc-idempotency.error');

/** Why a request was refused by the idempotency layer. */
export type IdempotencyErrorReason =
  /** No key was sent for a procedure that requires one. */
  | 'key_missing'
  /** The key is empty, longer than 255 characters or not printable ASCII. */
  | 'key_invalid'
  /** Another request with this key is still running. */
  | 'in_progress'
  /** The key was used before with a different payload. */
  | 'payload_mismatch'
  /** The store could not be reached in time and the policy is fail-closed. */
  | 'store_unavailable'
  /** The operation ran, but its result was larger than `maxResponseBytes`: it was not stored and will not run again for this key. */
  | 'response_too_large'
  /** The input cannot be fingerprinted (too deep, cyclic, unsupported value). */
  | 'input_unsupported'
  /** The operation ran but its result could not be stored; it will not run again for this key. */
  | 'outcome_unreplayable'
  /** A retry reached other steps than those recorded for its key (renamed, reordered or skipped). */
  | 'step_mismatch'
  /** A step completed but its result could not be recorded (not serializable, too large, store failure). */
  | 'step_unrecorded'
  /** `step()` was used wrongly: no name, two steps at once, a name used twice, a store without steps. */
  | 'step_misuse';

/**
 * How every `in_progress` message begins. The client link recognises the
 * layer's 409 by it when neither `data.idempotency` (the server's error
 * formatter) nor a `Retry-After` header (a streamed batch, a context with no
 * response headers) reached it: a 409 the procedure threw itself is an
 * answer and is not retried, this one is.
 */
export const IN_PROGRESS_MESSAGE = 'A request with this idempotency key is still being processed';

export interface IdempotencyErrorOptions {
  cause?: unknown;
  /** Seconds after which a retry with the same key may succeed. */
  retryAfter?: number;
}

/** The base class of every error this library throws at request time. */
export class IdempotencyError extends Error {
  override readonly name: string = 'IdempotencyError';
  readonly reason: IdempotencyErrorReason;
  /** Seconds the client should wait before retrying with the same key, where that helps. */
  readonly retryAfter: number | undefined;
  readonly [brand] = true;

  constructor(reason: IdempotencyErrorReason, message: string, options: IdempotencyErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.reason = reason;
    this.retryAfter = options.retryAfter;
  }
}

/** The 409 of a key in flight: {@link IN_PROGRESS_MESSAGE}, why (when there is more to say), and when to retry. */
export function inProgressError(retryAfter: number, why?: string): IdempotencyError {
  const detail = why === undefined ? '' : `: ${why}`;
  return new IdempotencyError(
    'in_progress',
    `${IN_PROGRESS_MESSAGE}${detail}. Retry with the same key after ${retryAfter} s.`,
    { retryAfter },
  );
}

/** The seconds an in-flight message written by {@link inProgressError} asks to wait, or undefined for any other message. */
export function retryAfterOfMessage(message: string): number | undefined {
  if (!message.startsWith(IN_PROGRESS_MESSAGE)) return undefined;
  const after = /Retry with the same key after (\d+(?:\.\d+)?) s\.$/.exec(message);
  return after === null ? undefined : Number(after[1]);
}

/**
 * Thrown when the library is configured wrongly, at creation time (never per
 * request): a negative TTL, a lock longer than the retention, and so on.
 */
export class IdempotencyConfigError extends Error {
  override readonly name = 'IdempotencyConfigError';
}

/** True for any error of this family, from any copy of the package. */
export function isIdempotencyErrorInstance(error: unknown): error is IdempotencyError {
  return typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[brand] === true;
}

/** Finds an idempotency error in `error` or its `cause` chain (a `TRPCError` wraps it as its cause). */
export function findIdempotencyError(error: unknown): IdempotencyError | undefined {
  return findInCauses(error, isIdempotencyErrorInstance);
}

function findInCauses<T>(error: unknown, test: (e: unknown) => e is T): T | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 8 && current != null; depth++) {
    if (test(current)) return current;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

const retryableBrand = Symbol.for('trpc-idempotency.retryable');

/**
 * Marks a failure as retryable: instead of being stored and replayed, it
 * releases the key so the client can fix the cause and retry with the same key.
 * Use it for failures that happened before any side effect (a declined card,
 * a validation done by a downstream service).
 *
 * @example
 * throw retryable(new TRPCError({ code: 'BAD_REQUEST', message: 'Card declined' }));
 */
export function retryable<TError extends Error>(error: TError): TError {
  Object.defineProperty(error, retryableBrand, { value: true, enumerable: false });
  return error;
}

/** True if `error`, or an error in its `cause` chain, was marked with {@link retryable}. */
export function isRetryable(error: unknown): boolean {
  return findInCauses(error, isMarkedRetryable) !== undefined;
}

function isMarkedRetryable(error: unknown): error is object {
  return typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[retryableBrand] === true;
}

/**
 * Why a store call failed, where the engine must tell failures apart:
 * - `unavailable`: the store could not be reached or did not answer (connection
 *   refused or lost, a server-side timeout, a server loading or failing over).
 *   The only failure `onStoreError: 'fail-open'` lets a request run unprotected.
 * - `contention`: concurrent calls on the same record kept conflicting
 *   (serialization failures) after the store's own retries: the key is busy (409).
 *
 * Any other failure (a full memory store, a missing table, an unexpected
 * reply) fails closed: 503, whatever `onStoreError` says.
 */
export type StoreFailureKind = 'unavailable' | 'contention';

const failureKind = Symbol.for('trpc-idempotency.store-failure');

/**
 * Marks `error` as a store failure of `kind`, for store authors: throw what it
 * returns. A frozen or non-object error is wrapped (as the returned error's `cause`).
 */
export function storeFailure(kind: StoreFailureKind, error: unknown): Error {
  if (error instanceof Error && Object.isExtensible(error)) {
    Object.defineProperty(error, failureKind, { value: kind, enumerable: false, configurable: true });
    return error;
  }
  const wrapped = new Error(error instanceof Error ? error.message : String(error), { cause: error });
  Object.defineProperty(wrapped, failureKind, { value: kind, enumerable: false, configurable: true });
  return wrapped;
}

/** The kind a store gave a failure with {@link storeFailure}, if any. */
export function storeFailureKind(error: unknown): StoreFailureKind | undefined {
  return typeof error === 'object' && error !== null
    ? ((error as Record<symbol, StoreFailureKind | undefined>)[failureKind] ?? undefined)
    : undefined;
}
