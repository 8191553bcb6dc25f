// trpc-idempotency/client: the @trpc/client half. Runs in browsers: no `node:` imports.

import type { IdempotencyKeySource } from './client/key-holder.js';

export { backoffDelay, DEFAULT_RETRY } from './client/backoff.js';
export type { CarriedIdempotencyKey, WithIdempotencyKey, WithIdempotencyKeyOptions } from './client/carried-key.js';
export {
  IDEMPOTENCY_FIELD,
  IdempotencyKeyExpiredError,
  readIdempotencyKey,
  withIdempotencyKey,
} from './client/carried-key.js';
export type { IdempotencyClientError, IdempotencyErrorData, IdempotencyErrorReason } from './client/failed-call.js';
export {
  getHttpStatus,
  getIdempotencyErrorData,
  getIdempotencyReason,
  getRetryAfterMs,
  isAbortError,
  isIdempotencyError,
  isKeyExpiredError,
  isRetryableError,
  RETRYABLE_STATUSES,
} from './client/failed-call.js';
export type { HeadersArgument, IdempotencyHeadersOptions } from './client/headers.js';
export { idempotencyHeaders } from './client/headers.js';
export type { CreateIdempotencyKeyOptions, IdempotencyKeyHolder, IdempotencyKeySource } from './client/key-holder.js';
export { createIdempotencyKey, randomKey } from './client/key-holder.js';
export type { IdempotencyLinkOptions, IdempotencyRetryEvent, IdempotencyRetryOptions } from './client/link.js';
export { idempotencyLink } from './client/link.js';
export type { MutationCacheOwner, PersistableMutation } from './client/persisted-mutations.js';
export { resumeMutations, shouldPersistMutation } from './client/persisted-mutations.js';
export { IdempotencyConfigError } from './core/idempotency-error.js';

/** What `idempotencyLink` reads from, and writes to, an operation's context. */
export interface IdempotencyOperationContext {
  /** The key of this operation: a string, or a holder from `createIdempotencyKey()`; a new UUID v4 when absent. */
  idempotencyKey?: string | IdempotencyKeySource;
}
