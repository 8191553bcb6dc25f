import { utf8Length } from '#platform';
import { IdempotencyError } from './idempotency-error.js';
import type { OutcomeCodec } from './outcome-codec.js';
import type { ExecuteResult } from './types.js';

/**
 * The stored form of an operation's outcome, and what a replay of it gives.
 *
 * An operation that ran but whose result cannot be replayed (the codec cannot
 * serialize it, it is a stream, or it is larger than `maxResponseBytes`) is
 * still recorded, as a `failed` record whose body is a marker: its retries
 * get an error saying it ran, instead of running it a second time.
 */

/**
 * Bodies of the markers. Printable (a PostgreSQL `text` column refuses NUL),
 * and no JSON text starts with `#`, so no codec built on JSON can write one.
 */
export const UNREPLAYABLE_BODY = '#trpc-idempotency:unreplayable';
export const TOO_LARGE_BODY = '#trpc-idempotency:response_too_large';

/** What to store for a result, and why it is a marker if it is one. */
export type EncodedResult =
  | { state: 'completed'; body: string; marker?: undefined }
  | { state: 'failed'; body: string; marker: 'unreplayable' | 'response_too_large' };

export function encodeResult<T>(value: T, codec: OutcomeCodec<T>, maxBytes: number): EncodedResult {
  if (isStream(value)) return { state: 'failed', body: UNREPLAYABLE_BODY, marker: 'unreplayable' };
  let body: string;
  try {
    body = codec.serialize(value);
  } catch {
    return { state: 'failed', body: UNREPLAYABLE_BODY, marker: 'unreplayable' };
  }
  if (byteLengthExceeds(body, maxBytes)) return { state: 'failed', body: TOO_LARGE_BODY, marker: 'response_too_large' };
  return { state: 'completed', body };
}

/** The marker a stored `failed` body is, if it is one. */
export function markerOf(body: string): 'unreplayable' | 'response_too_large' | undefined {
  if (body.charCodeAt(0) !== 0x23) return undefined; // '#'
  return body === UNREPLAYABLE_BODY ? 'unreplayable' : body === TOO_LARGE_BODY ? 'response_too_large' : undefined;
}

/** The error a retry of a marked outcome gets: it ran once and will not run again. */
export function markerError(marker: 'unreplayable' | 'response_too_large', maxBytes: number): IdempotencyError {
  if (marker === 'response_too_large') {
    return new IdempotencyError(
      'response_too_large',
      `The operation with this idempotency key ran, but its result was larger than maxResponseBytes (${maxBytes} bytes), so it was not stored and cannot be replayed. ` +
        'It will not run again with this key: check its effect by other means (for example, list the resource). Return a smaller result or raise maxResponseBytes.',
    );
  }
  return new IdempotencyError(
    'outcome_unreplayable',
    'The operation with this idempotency key ran, but its result could not be stored, so it cannot be replayed. ' +
      'It will not run again with this key: check its effect by other means (for example, list the resource).',
  );
}

function isStream(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  return (
    Symbol.asyncIterator in value ||
    typeof (value as { getReader?: unknown }).getReader === 'function' ||
    typeof (value as { subscribe?: unknown }).subscribe === 'function'
  );
}

/** Whether `body` takes more than `max` bytes in UTF-8. */
export function byteLengthExceeds(body: string, max: number): boolean {
  // A UTF-16 code unit is 1 to 3 UTF-8 bytes: skip the exact count when the length decides.
  if (body.length > max) return true;
  if (body.length * 3 <= max) return false;
  return utf8Length(body) > max;
}

/** What a retry gets from a stored outcome: the first value, the stored error, or the error saying it cannot be replayed. */
export function decodeStored<T>(
  stored: { state: 'completed' | 'failed'; body: string; marker: 'unreplayable' | 'response_too_large' | undefined },
  codec: OutcomeCodec<unknown>,
  maxBytes: number,
): ExecuteResult<T> {
  if (stored.state === 'completed') return { ok: true, value: codec.deserialize(stored.body) as T, replayed: true };
  if (stored.marker !== undefined) return { ok: false, error: markerError(stored.marker, maxBytes), replayed: true };
  return { ok: false, error: codec.deserializeError(stored.body), replayed: true };
}
