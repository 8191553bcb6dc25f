// trpc-idempotency/core: the engine without tRPC, for queue consumers, webhook
// handlers and store authors. Loads nothing of @trpc/server.

export { jsonCodec, type OutcomeCodec } from './core/codec.js';
export type { IdempotencyErrorOptions, IdempotencyErrorReason, StoreFailureKind } from './core/errors.js';
export {
  findIdempotencyError,
  IdempotencyConfigError,
  IdempotencyError,
  isRetryable,
  retryable,
  storeFailure,
} from './core/errors.js';
export type { IdempotencyEvent, IdempotencyEventHandler, IdempotencyEventResult } from './core/events.js';
export { canonicalize, fingerprint, MAX_FINGERPRINT_DEPTH, MAX_FINGERPRINT_SHARED } from './core/fingerprint.js';
export { MAX_KEY_LENGTH, parseIdempotencyKey, recordId } from './core/key.js';
export type { IdempotencyPolicyOptions, InFlightPolicy, ResolvedPolicy, StoreErrorPolicy } from './core/policy.js';
export { DEFAULT_POLICY, resolvePolicy } from './core/policy.js';
export { deriveStepKey, type IdempotencySteps } from './core/steps.js';
// For store authors: the contract, the record id and the fingerprint a store keeps.
export type {
  ClaimAnswer,
  ClaimInput,
  ClaimResult,
  CompleteInput,
  CompleteResult,
  ExtendInput,
  FencedInput,
  IdempotencyStore,
  RecordedStep,
  RecordedSteps,
  RecordState,
  SaveStepInput,
  SaveStepResult,
  StoreTransaction,
} from './core/store.js';
export type {
  ExecuteInput,
  ExecuteResult,
  IdempotencyEngine,
  IdempotencyEngineOptions,
  RunOptions,
} from './core/types.js';
export { createIdempotencyEngine } from './stores/default-engine.js';
export type { MemoryStore, MemoryStoreOptions } from './stores/memory.js';
export { memoryStore } from './stores/memory.js';
