// trpc-idempotency/core: the engine without tRPC, for queue consumers, webhook
// handlers and store authors. Loads nothing of @trpc/server.
// Each name has a user: the engine and its options, types and errors (engine
// users); parseIdempotencyKey and MAX_KEY_LENGTH (reading a key from a queue
// message or a webhook); DEFAULT_POLICY (building on the defaults);
// deriveStepKey, recordId and fingerprint (a step's key, a record's id and
// fingerprint outside a call: docs/steps.md, docs/reference/store-contract.md);
// the store contract, storeFailure and StoreFailureKind (store authors).

export type {
  IdempotencyAdmin,
  IdempotencyAdminOptions,
  InspectedRecord,
  RecordRef,
  ReleaseInput,
  ReleaseRefusal,
  ReleaseResult,
  ScanInput,
  StatsResult,
  StuckInput,
  StuckResult,
} from './core/admin.js';
export { idempotencyAdmin } from './core/admin.js';
export type { IdempotencyEvent, IdempotencyEventHandler, IdempotencyEventResult } from './core/events.js';
export { fingerprint } from './core/fingerprint.js';
export type { IdempotencyErrorOptions, IdempotencyErrorReason, StoreFailureKind } from './core/idempotency-error.js';
export {
  findIdempotencyError,
  IdempotencyConfigError,
  IdempotencyError,
  retryable,
  storeFailure,
} from './core/idempotency-error.js';
export { jsonCodec, type OutcomeCodec } from './core/outcome-codec.js';
export type { IdempotencyPolicyOptions, InFlightPolicy, ResolvedPolicy, StoreErrorPolicy } from './core/policy.js';
export { DEFAULT_POLICY } from './core/policy.js';
export { MAX_KEY_LENGTH, parseIdempotencyKey, recordId } from './core/record-id.js';
export { deriveStepKey } from './core/step-key.js';
export type * from './core/store.js';
export type * from './core/store-admin.js';
export type {
  ExecuteInput,
  ExecuteResult,
  IdempotencyEngine,
  IdempotencyEngineOptions,
  IdempotencySteps,
  RunOptions,
} from './core/types.js';
export { createIdempotencyEngine } from './default-engine.js';
export type { MemoryStore, MemoryStoreOptions } from './stores/memory/store.js';
export { memoryStore } from './stores/memory/store.js';
