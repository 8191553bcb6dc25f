// trpc-idempotency: safe retries for tRPC mutations.
// The root entry holds the tRPC adapter, the engine, the errors and the memory store.

export { withIdempotency } from './trpc/procedure.js';
export type { DataTransformerOption, IdempotencyMeta, IdempotencyProcedureOptions, WithIdempotencyOptions } from './trpc/procedure.js';
export {
  getIdempotencyErrorData,
  idempotencyErrorFormatter,
  toTRPCError,
  trpcCodeOf,
  type IdempotencyErrorData,
} from './trpc/errors.js';
export { RELEASED_CLIENT_STATUSES, trpcCodec } from './trpc/codec.js';

export { createIdempotencyEngine } from './core/engine.js';
export type { ExecuteInput, ExecuteResult, IdempotencyEngine, IdempotencyEngineOptions } from './core/engine.js';
export { DEFAULT_POLICY, resolvePolicy } from './core/policy.js';
export type { IdempotencyPolicyOptions, InFlightPolicy, ResolvedPolicy, StoreErrorPolicy } from './core/policy.js';
export { jsonCodec, type OutcomeCodec } from './core/codec.js';
export { canonicalize, fingerprint, MAX_FINGERPRINT_DEPTH } from './core/fingerprint.js';
export { MAX_KEY_LENGTH, parseIdempotencyKey, recordId } from './core/key.js';
export type { IdempotencyEvent, IdempotencyEventHandler, IdempotencyEventResult } from './core/events.js';
export {
  IdempotencyConfigError,
  IdempotencyConflictError,
  IdempotencyError,
  IdempotencyInputError,
  IdempotencyKeyError,
  IdempotencyMismatchError,
  IdempotencyResponseTooLargeError,
  IdempotencyStoreError,
  findIdempotencyError,
  isIdempotencyError,
  isRetryable,
  retryable,
} from './core/errors.js';
export type { IdempotencyErrorOptions, IdempotencyErrorReason } from './core/errors.js';
export type {
  ClaimInput,
  ClaimResult,
  CompleteInput,
  ExtendInput,
  FencedInput,
  IdempotencyStore,
  RecordState,
} from './core/store.js';

export { memoryStore } from './stores/memory.js';
export type { MemoryStore, MemoryStoreOptions } from './stores/memory.js';
