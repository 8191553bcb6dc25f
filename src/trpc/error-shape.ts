import type { TRPC_ERROR_CODE_KEY } from '@trpc/server';
import { TRPCError } from '@trpc/server';
import { findIdempotencyError, type IdempotencyError, type IdempotencyErrorReason } from '../core/idempotency-error.js';

/** The tRPC code (and so the HTTP status) of each reason. */
const CODES: Record<IdempotencyErrorReason, TRPC_ERROR_CODE_KEY> = {
  key_missing: 'BAD_REQUEST',
  key_invalid: 'BAD_REQUEST',
  input_unsupported: 'BAD_REQUEST',
  in_progress: 'CONFLICT',
  payload_mismatch: 'UNPROCESSABLE_CONTENT',
  store_unavailable: 'SERVICE_UNAVAILABLE',
  response_too_large: 'INTERNAL_SERVER_ERROR',
  outcome_unreplayable: 'INTERNAL_SERVER_ERROR',
  step_mismatch: 'INTERNAL_SERVER_ERROR',
  step_unrecorded: 'INTERNAL_SERVER_ERROR',
  step_misuse: 'INTERNAL_SERVER_ERROR',
};

/** Wraps an idempotency error in the `TRPCError` the client receives; the original is its `cause`. */
export function toTRPCError(error: IdempotencyError): TRPCError {
  return new TRPCError({ code: CODES[error.reason], message: error.message, cause: error });
}

/** What reaches the client in `error.data.idempotency` with {@link idempotencyErrorFormatter}. */
export interface IdempotencyErrorData {
  reason: IdempotencyErrorReason;
  /** Seconds to wait before retrying with the same key (for `in_progress` and `store_unavailable`). */
  retryAfter?: number;
}

/** The machine-readable part of an idempotency error, for your own `errorFormatter`. */
export function idempotencyErrorData(error: unknown): IdempotencyErrorData | undefined {
  const found = findIdempotencyError(error);
  if (found === undefined) return undefined;
  return found.retryAfter === undefined
    ? { reason: found.reason }
    : { reason: found.reason, retryAfter: found.retryAfter };
}

/**
 * An `errorFormatter` that adds `data.idempotency: { reason, retryAfter }` to
 * idempotency errors, so clients can tell them apart without parsing messages.
 *
 * @example
 * initTRPC.create({ errorFormatter: idempotencyErrorFormatter });
 * // or, with your own formatter:
 * errorFormatter: ({ shape, error }) => ({ ...shape, data: { ...shape.data, idempotency: idempotencyErrorData(error) } })
 */
export function idempotencyErrorFormatter<TShape extends { data: object }>(opts: {
  shape: TShape;
  error: TRPCError;
}): TShape & { data: TShape['data'] & { idempotency?: IdempotencyErrorData } } {
  const idempotency = idempotencyErrorData(opts.error);
  return idempotency === undefined ? opts.shape : { ...opts.shape, data: { ...opts.shape.data, idempotency } };
}
