/**
 * Reading a failed call on the client. Works on `TRPCClientError` and on the
 * plain `TRPCClientErrorLike` objects TanStack Query hands out, from any copy
 * of `@trpc/client`: fields are read by shape, never with `instanceof`.
 */
import { type IdempotencyErrorReason, IN_PROGRESS_MESSAGE, retryAfterOfMessage } from '../core/idempotency-error.js';
import type { IdempotencyErrorData } from '../trpc/error-shape.js';

export type { IdempotencyErrorData, IdempotencyErrorReason };

/** A client error that the server's idempotency layer sent (needs `idempotencyErrorFormatter` on the server). */
export interface IdempotencyClientError {
  readonly message: string;
  readonly data: { readonly idempotency: IdempotencyErrorData; readonly httpStatus?: number; readonly code?: string };
}

/**
 * HTTP statuses retried with the same key: the server either did not run the
 * call, is still running it (409), or released the key (408, 429, 5xx).
 * 400, 401, 403, 404 and 422 are answers: retrying as is cannot change them.
 */
export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([408, 409, 429, 500, 502, 503, 504]);

// tRPC's error codes and their HTTP statuses, for servers whose error
// formatter drops `data.httpStatus`.
const STATUS_OF_CODE: Record<string, number> = {
  PARSE_ERROR: 400,
  BAD_REQUEST: 400,
  UNAUTHORIZED: 401,
  PAYMENT_REQUIRED: 402,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  METHOD_NOT_SUPPORTED: 405,
  TIMEOUT: 408,
  CONFLICT: 409,
  PRECONDITION_FAILED: 412,
  PAYLOAD_TOO_LARGE: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  UNPROCESSABLE_CONTENT: 422,
  TOO_MANY_REQUESTS: 429,
  CLIENT_CLOSED_REQUEST: 499,
  INTERNAL_SERVER_ERROR: 500,
  NOT_IMPLEMENTED: 501,
  BAD_GATEWAY: 502,
  SERVICE_UNAVAILABLE: 503,
  GATEWAY_TIMEOUT: 504,
};

interface ErrorFields {
  name?: unknown;
  message?: unknown;
  cause?: unknown;
  data?: { httpStatus?: unknown; code?: unknown; idempotency?: { reason?: unknown; retryAfter?: unknown } } | null;
  meta?: { response?: { status?: unknown; headers?: { get?: (name: string) => string | null } } } | null;
}

function fields(error: unknown): ErrorFields | undefined {
  return typeof error === 'object' && error !== null ? (error as ErrorFields) : undefined;
}

/**
 * `data.idempotency` of an error the server's idempotency layer sent, or
 * undefined. Only the server's formatter writes that field, so any reason is
 * taken, even one this client does not know yet (a newer server): it is then
 * treated as final, never retried.
 */
export function getIdempotencyErrorData(error: unknown): IdempotencyErrorData | undefined {
  const data = fields(error)?.data?.idempotency;
  if (typeof data !== 'object' || data === null || typeof data.reason !== 'string' || data.reason === '')
    return undefined;
  const reason = data.reason as IdempotencyErrorReason;
  return typeof data.retryAfter === 'number' ? { reason, retryAfter: data.retryAfter } : { reason };
}

/**
 * True if the server's idempotency layer refused the call (missing or invalid
 * key, key in flight, payload mismatch, store unavailable...). The reason
 * travels in `data.idempotency`, so the server must use
 * `idempotencyErrorFormatter` (or `getIdempotencyErrorData` in its own formatter).
 */
export function isIdempotencyError<TError>(error: TError): error is TError & IdempotencyClientError {
  return getIdempotencyErrorData(error) !== undefined;
}

/**
 * Why the idempotency layer refused the call: `'key_missing'`, `'key_invalid'`,
 * `'input_unsupported'` (400), `'in_progress'` (409), `'payload_mismatch'`
 * (422), `'store_unavailable'` (503), `'response_too_large'` (500), and so
 * on; undefined for any other error, or when the server did not install the
 * formatter.
 */
export function getIdempotencyReason(error: unknown): IdempotencyErrorReason | undefined {
  return getIdempotencyErrorData(error)?.reason;
}

/**
 * The HTTP status of a failed call: `data.httpStatus`, else the status of
 * `data.code`, else the response's own status (not for a 207 batch). Undefined
 * when no answer was read (network failure, abort, timeout, a body that is not
 * tRPC's JSON).
 */
export function getHttpStatus(error: unknown): number | undefined {
  const f = fields(error);
  if (typeof f?.data?.httpStatus === 'number') return f.data.httpStatus;
  if (typeof f?.data?.code === 'string' && f.data.code in STATUS_OF_CODE) return STATUS_OF_CODE[f.data.code];
  const status = f?.meta?.response?.status;
  return typeof status === 'number' && status >= 400 ? status : undefined;
}

/**
 * How long the server asked to wait before a retry, in ms: from
 * `data.idempotency.retryAfter`, else from the `Retry-After` header (seconds
 * or an HTTP date) of a 409, 429 or 503, else, for the layer's in-flight 409,
 * from its message ("... Retry with the same key after 1 s.").
 */
export function getRetryAfterMs(error: unknown, now: number = Date.now()): number | undefined {
  const seconds = getIdempotencyErrorData(error)?.retryAfter;
  if (seconds !== undefined) return Math.max(0, seconds * 1000);
  const status = getHttpStatus(error);
  if (status !== 409 && status !== 429 && status !== 503) return undefined;
  const headers = fields(error)?.meta?.response?.headers;
  const value = typeof headers?.get === 'function' ? headers.get('retry-after') : null;
  if (value !== null && value !== undefined) {
    if (/^\s*\d+\s*$/.test(value)) return Number(value) * 1000;
    const date = Date.parse(value);
    if (!Number.isNaN(date)) return Math.max(0, date - now);
  }
  const message = fields(error)?.message;
  const after = status === 409 && typeof message === 'string' ? retryAfterOfMessage(message) : undefined;
  return after === undefined ? undefined : after * 1000;
}

/** True if the call was stopped by its caller's AbortSignal (not by a timeout). */
export function isAbortError(error: unknown): boolean {
  for (let current: unknown = error, depth = 0; depth < 4 && current != null; depth++) {
    if (fields(current)?.name === 'AbortError') return true;
    current = fields(current)?.cause;
  }
  return false;
}

/**
 * True if `idempotencyLink` refused to send a key older than its
 * `maxKeyAgeMs` (an `IdempotencyKeyExpiredError`, or a client error wrapping
 * one): the outcome is unresolved, and a retry with that key is never made.
 */
export function isKeyExpiredError(error: unknown): boolean {
  for (let current: unknown = error, depth = 0; depth < 4 && current != null; depth++) {
    if (fields(current)?.name === 'IdempotencyKeyExpiredError') return true;
    current = fields(current)?.cause;
  }
  return false;
}

/**
 * The default retry policy: true when a retry with the same key can succeed
 * and cannot run the operation twice.
 * - the reason, when the server sent one: `in_progress`, `store_unavailable`
 *   and `step_unrecorded` (a step's result could not be recorded: the key was
 *   released, and the retry runs that step again under its derived key) are
 *   retried; every other reason is final (key and payload errors, and
 *   `response_too_large`: the procedure ran, nothing was stored, a retry
 *   would run it again);
 * - else the status: {@link RETRYABLE_STATUSES}, a 409 only when it is the
 *   layer's in-flight answer (a Retry-After header, or its in-flight message);
 * - no status (network failure, timeout, an unreadable answer): retried, since
 *   nothing definitive came back. An abort, and a key too old to send
 *   ({@link isKeyExpiredError}), are never retried.
 */
export function isRetryableError(error: unknown): boolean {
  if (isKeyExpiredError(error)) return false; // never sent: a retry would meet the same refusal
  const reason = getIdempotencyReason(error);
  if (reason !== undefined) {
    return reason === 'in_progress' || reason === 'store_unavailable' || reason === 'step_unrecorded';
  }
  const status = getHttpStatus(error);
  // A 409 the procedure threw itself ("already exists") is an answer, and its key was released:
  // a retry would only run the procedure again.
  if (status === 409) return isInProgressMessage(error) || getRetryAfterMs(error) !== undefined;
  if (status !== undefined) return RETRYABLE_STATUSES.has(status);
  return !isAbortError(error);
}

/**
 * Whether a key must be kept after this failure: the outcome is unknown or
 * can still change (the call may have run, or may be running). An abort keeps
 * the key too: the request may have reached the server.
 */
export function keepsKey(error: unknown): boolean {
  // step_mismatch is not retried automatically (the server's code must change first), but the
  // operation is part done: only its key, sent again, resumes it rather than running its steps anew.
  return isRetryableError(error) || isAbortError(error) || getIdempotencyReason(error) === 'step_mismatch';
}

/** True for the layer's in-flight message, whatever carried it (a server without the error formatter included). */
function isInProgressMessage(error: unknown): boolean {
  const message = fields(error)?.message;
  return typeof message === 'string' && message.startsWith(IN_PROGRESS_MESSAGE);
}
