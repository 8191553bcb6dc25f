import { isRetryable } from './idempotency-error.js';
import { byteLengthExceeds, encodeResult, TOO_LARGE_BODY } from './outcome.js';
import type { OutcomeCodec } from './outcome-codec.js';

/** What an operation ended with: its value, or what it threw. */
export type Outcome<T = unknown> = { ok: true; value: T } | { ok: false; error: unknown };

/**
 * What settles a claim once its operation ran.
 * - `store`: record the outcome; retries replay it (a marker body says it ran
 *   but cannot be replayed: retries get an error and it never runs again).
 * - `release`: give the key back; a retry runs the operation again.
 * - `fenced`: another request holds the key now; nothing of ours to settle.
 */
export type Settlement =
  | { kind: 'store'; state: 'completed' | 'failed'; body: string; reason?: 'unreplayable' | 'response_too_large' }
  | { kind: 'release'; reason: 'error' | 'retryable' | 'unreplayable' | 'response_too_large' }
  | { kind: 'fenced' };

/** The parts of a policy that decide a settlement. */
export interface ClassifyPolicy {
  readonly maxResponseBytes: number;
  /**
   * In transactional mode an outcome that cannot be stored rolls the
   * operation's writes back, so nothing happened and the key is released; out
   * of it the operation's effects stay, so a marker is stored instead.
   */
  readonly transaction: boolean;
}

/**
 * The decision for one outcome. Pure: the engine stores or releases what
 * this says.
 *
 * | outcome | decision |
 * |---|---|
 * | a value the codec can store within maxResponseBytes | store `completed` |
 * | a value too large, a stream, or one the codec cannot serialize | store a `failed` marker (transaction: release) |
 * | an error marked `retryable()` | release |
 * | an error the codec stores (a tRPC 4xx) | store `failed` (over maxResponseBytes: a `failed` marker; transaction: release) |
 * | any other error (5xx, 408/409/429/499, unserializable) | release |
 */
export function classify(
  outcome: Outcome,
  codec: OutcomeCodec<unknown>,
  policy: ClassifyPolicy,
): Exclude<Settlement, { kind: 'fenced' }> {
  if (outcome.ok) {
    const encoded = encodeResult(outcome.value, codec, policy.maxResponseBytes);
    if (encoded.marker === undefined) return { kind: 'store', state: 'completed', body: encoded.body };
    if (policy.transaction) return { kind: 'release', reason: encoded.marker };
    return { kind: 'store', state: 'failed', body: encoded.body, reason: encoded.marker };
  }
  const { error } = outcome;
  if (isRetryable(error)) return { kind: 'release', reason: 'retryable' };
  let body: string | undefined;
  try {
    body = codec.serializeError(error);
  } catch {
    // An error that cannot be serialized is released, like a 5xx.
  }
  if (body === undefined) return { kind: 'release', reason: 'error' };
  // A stored error is bounded as a result is: too large, it is recorded as ran (or released, rolled back).
  if (byteLengthExceeds(body, policy.maxResponseBytes)) {
    return policy.transaction
      ? { kind: 'release', reason: 'response_too_large' }
      : { kind: 'store', state: 'failed', body: TOO_LARGE_BODY, reason: 'response_too_large' };
  }
  return { kind: 'store', state: 'failed', body };
}
