import { checkFunction, configError } from '../core/options.js';
import { keyProblem, MAX_KEY_LENGTH } from '../core/record-id.js';
import { keepsKey } from './failed-call.js';

interface CryptoLike {
  randomUUID?: () => string;
  getRandomValues?: <T extends Uint8Array>(array: T) => T;
}

function webCrypto(): CryptoLike | undefined {
  return (globalThis as { crypto?: CryptoLike }).crypto;
}

/** True where {@link randomKey} can make keys: Node 20+, Deno, Bun and every current browser. */
export function canMakeRandomKeys(): boolean {
  return typeof webCrypto()?.getRandomValues === 'function' || typeof webCrypto()?.randomUUID === 'function';
}

/**
 * A new UUID v4. `crypto.randomUUID()` exists only in secure contexts (HTTPS,
 * localhost), so a page served over plain HTTP falls back to
 * `crypto.getRandomValues()`, which exists everywhere.
 */
export function randomKey(): string {
  const crypto = webCrypto();
  if (typeof crypto?.randomUUID === 'function') return crypto.randomUUID();
  if (typeof crypto?.getRandomValues !== 'function') {
    throw new Error('trpc-idempotency: no Web Crypto API here to make a random key; pass generateKey.');
  }
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6]! & 0x0f) | 0x40; // version 4
  bytes[8] = (bytes[8]! & 0x3f) | 0x80; // RFC 9562 variant
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Anything that hands out the key of the current user action: a holder from {@link createIdempotencyKey}. */
export interface IdempotencyKeySource {
  current(): string;
}

/**
 * The key of one user action, kept across re-submits and retries until the
 * action is over. Its methods are bound: `onSuccess: key.reset` works.
 */
export interface IdempotencyKeyHolder extends IdempotencyKeySource {
  /** The key of the current action, made on first use and kept until `reset()`. */
  current(): string;
  /** The current key if one was made, without making one. */
  peek(): string | undefined;
  /** Forgets the key: the next `current()` starts a new operation. Call it once the action succeeded. */
  reset(): void;
  /**
   * Ends the action according to its outcome: resets after a success (no
   * error) or a definitive refusal (a 4xx such as 400, 403 or 422, so a
   * corrected re-submit is a new operation); keeps the key when the outcome is
   * unknown (network failure, abort, timeout, 409, 5xx), so a re-submit
   * replays or finishes the same operation. Made for TanStack's `onSettled`.
   */
  settle(error?: unknown): void;
}

/** Options of {@link createIdempotencyKey}. */
export interface CreateIdempotencyKeyOptions {
  /**
   * Makes a key; it must return 1 to 255 printable ASCII characters.
   * @default randomKey (a UUID v4)
   */
  generateKey?: () => string;
}

/**
 * A holder for the key of one user action, to put in the operation context
 * (`context: { idempotencyKey: holder }`): `idempotencyLink` reads
 * `holder.current()` for every operation, so TanStack Query's retries and the
 * user's re-submits reuse the key until you `reset()` (or `settle()`) it.
 *
 * @example
 * const [key] = useState(createIdempotencyKey); // React: one holder per form
 * useMutation(trpc.pay.mutationOptions({
 *   trpc: { context: { idempotencyKey: key } },
 *   onSettled: (_data, error) => key.settle(error),
 * }));
 */
export function createIdempotencyKey(options: CreateIdempotencyKeyOptions = {}): IdempotencyKeyHolder {
  const generateKey = options.generateKey ?? randomKey;
  checkFunction(generateKey, 'generateKey', 'createIdempotencyKey', 'a function that returns a key');
  if (options.generateKey === undefined && !canMakeRandomKeys()) {
    throw configError('createIdempotencyKey', 'this runtime has no Web Crypto API to make keys; pass generateKey.');
  }
  let key: string | undefined;
  const reset = () => {
    key = undefined;
  };
  return {
    current: () => (key ??= checkKey(generateKey(), 'generateKey() returned')),
    peek: () => key,
    reset,
    settle: (error?: unknown) => {
      if (error === undefined || error === null || !keepsKey(error)) reset();
    },
  };
}

/** Throws unless `key` is 1 to 255 printable ASCII characters, the keys the server accepts. */
export function checkKey(key: unknown, what: string): string {
  if (typeof key !== 'string') {
    throw new TypeError(
      `trpc-idempotency: ${what} a ${typeof key}, not a string. An idempotency key is a string such as a UUID v4.`,
    );
  }
  const problem = keyProblem(key);
  if (problem !== undefined) {
    throw new TypeError(
      `trpc-idempotency: ${what} an invalid idempotency key ${JSON.stringify(key.slice(0, 40))}: it ${problem}. ` +
        `A key is 1 to ${MAX_KEY_LENGTH} printable ASCII characters, such as a UUID v4.`,
    );
  }
  return key;
}

/**
 * The key of one operation: the caller's (a string, or a holder's current
 * key) when the context carries one, else a new one.
 */
export function resolveKey(supplied: unknown, generateKey: () => string): string {
  if (supplied === undefined || supplied === null) return checkKey(generateKey(), 'generateKey() returned');
  if (typeof supplied === 'object' && typeof (supplied as IdempotencyKeySource).current === 'function') {
    return checkKey((supplied as IdempotencyKeySource).current(), 'context.idempotencyKey.current() returned');
  }
  return checkKey(supplied, 'context.idempotencyKey is');
}
