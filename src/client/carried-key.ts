/**
 * A key carried in a mutation's input, so that it lives wherever the input
 * does: in TanStack Query's mutation variables, and so in what its persisters
 * store. `idempotencyLink` takes it out of the input before the call is sent.
 */
import { checkFunction, configError } from '../core/options.js';
import { canMakeRandomKeys, checkKey, randomKey } from './key-holder.js';

/** The input's field that carries the key; `idempotencyLink` removes it before the input is sent. */
export const IDEMPOTENCY_FIELD = '~idempotency';

/** What {@link IDEMPOTENCY_FIELD} holds: the key and when it was made (ms since the epoch, the client's clock). */
export interface CarriedIdempotencyKey {
  key: string;
  createdAt: number;
}

/** An input with its key: assignable wherever the input is. */
export type WithIdempotencyKey<TInput extends object> = TInput & {
  readonly [IDEMPOTENCY_FIELD]: CarriedIdempotencyKey;
};

/** Options of {@link withIdempotencyKey}. */
export interface WithIdempotencyKeyOptions {
  /**
   * The key, when the operation already has one (an order id, or the key of an earlier attempt).
   * @default a new key from `generateKey`
   */
  key?: string;
  /**
   * Makes the key; it must return 1 to 255 printable ASCII characters.
   * @default randomKey (a UUID v4)
   */
  generateKey?: () => string;
  /**
   * The clock that dates the key, in ms since the epoch.
   * @default Date.now
   */
  now?: () => number;
}

/**
 * The input of one user action with its key, made now: call it when the user
 * acts and pass the result as the mutation's variables. Every call made with
 * these variables sends that key: a retry by TanStack Query, a paused mutation
 * resumed when the network comes back, one restored by a persister after a
 * reload. An input that already carries a key is returned as it is.
 *
 * @example
 * pay.mutate(withIdempotencyKey({ amount: 1000 }));
 */
export function withIdempotencyKey<TInput extends object>(
  input: TInput,
  options: WithIdempotencyKeyOptions = {},
): WithIdempotencyKey<TInput> {
  const where = 'withIdempotencyKey';
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new TypeError(
      `trpc-idempotency: withIdempotencyKey: the input is ${input === null ? 'null' : Array.isArray(input) ? 'an array' : `a ${typeof input}`}; a key travels in an object input. Give the procedure an object input, or pass the key as context.idempotencyKey.`,
    );
  }
  const carried = readIdempotencyKey(input);
  if (carried !== undefined) return input as WithIdempotencyKey<TInput>;
  const { generateKey, now = Date.now } = options;
  if (generateKey !== undefined) checkFunction(generateKey, 'generateKey', where, 'a function that returns a key');
  checkFunction(now, 'now', where, 'a function that returns ms since the epoch');
  if (options.key === undefined && generateKey === undefined && !canMakeRandomKeys()) {
    throw configError(where, 'this runtime has no Web Crypto API to make keys; pass key or generateKey.');
  }
  const key =
    options.key !== undefined
      ? checkKey(options.key, 'options.key is')
      : checkKey((generateKey ?? randomKey)(), 'generateKey() returned');
  return { ...input, [IDEMPOTENCY_FIELD]: { key, createdAt: now() } };
}

/**
 * The key an input (a mutation's variables) carries, or undefined. Throws if
 * the field is there but is not `{ key, createdAt }`.
 */
export function readIdempotencyKey(input: unknown): CarriedIdempotencyKey | undefined {
  if (typeof input !== 'object' || input === null || !(IDEMPOTENCY_FIELD in input)) return undefined;
  const carried = (input as Record<string, unknown>)[IDEMPOTENCY_FIELD] as Partial<CarriedIdempotencyKey> | null;
  if (typeof carried !== 'object' || carried === null || !Number.isFinite(carried.createdAt)) {
    throw new TypeError(
      `trpc-idempotency: the input's ${JSON.stringify(IDEMPOTENCY_FIELD)} field is not { key, createdAt }. Make it with withIdempotencyKey(input).`,
    );
  }
  return { key: checkKey(carried.key, `the input's ${IDEMPOTENCY_FIELD}.key is`), createdAt: carried.createdAt! };
}

/** The input without its key field, as the server is to receive it. */
export function withoutIdempotencyKey(input: object): object {
  const { [IDEMPOTENCY_FIELD]: _carried, ...rest } = input as Record<string, unknown>;
  return rest;
}

/**
 * Why `idempotencyLink` did not send a carried key: it is older than the
 * server keeps records (`maxKeyAgeMs`), so the server may have forgotten the
 * first outcome and would run the call again. The outcome is unresolved:
 * look it up in your own records (an order, a payment list) before acting
 * again. Never retried.
 */
export class IdempotencyKeyExpiredError extends Error {
  override readonly name = 'IdempotencyKeyExpiredError';
  readonly reason = 'key_expired';
  readonly key: string;
  readonly createdAt: number;
  readonly maxKeyAgeMs: number;

  constructor({ key, createdAt, maxKeyAgeMs }: { key: string; createdAt: number; maxKeyAgeMs: number }) {
    super(
      `The idempotency key ${key} was made at ${new Date(createdAt).toISOString()}, more than ${maxKeyAgeMs} ms ago (maxKeyAgeMs): the server may no longer remember its outcome, so it was not sent. Check whether the operation happened before starting it again with a new key.`,
    );
    this.key = key;
    this.createdAt = createdAt;
    this.maxKeyAgeMs = maxKeyAgeMs;
  }
}
