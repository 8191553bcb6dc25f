// trpc-idempotency: safe retries for tRPC mutations. This entry is what a tRPC
// server needs; the engine without tRPC, and what store authors need, is in
// trpc-idempotency/core, the client half in trpc-idempotency/client.

export type { IdempotencyErrorReason } from './core/errors.js';
export { IdempotencyConfigError, IdempotencyError, retryable } from './core/errors.js';
export type { IdempotencyEvent, IdempotencyEventHandler, IdempotencyEventResult } from './core/events.js';
export type { IdempotencyPolicyOptions, InFlightPolicy, StoreErrorPolicy } from './core/policy.js';
export type { IdempotencySteps } from './core/steps.js';
export type { IdempotencyStore } from './core/store.js';
export type { IdempotencyEngine, IdempotencyEngineOptions } from './core/types.js';
export { createIdempotencyEngine } from './stores/default-engine.js';
export type { MemoryStore, MemoryStoreOptions } from './stores/memory.js';
export { memoryStore } from './stores/memory.js';
export { withIdempotency } from './trpc/builder.js';
export { type IdempotencyErrorData, idempotencyErrorData, idempotencyErrorFormatter } from './trpc/errors.js';
export type {
  DataTransformerOption,
  IdempotencyMeta,
  IdempotencyProcedureOptions,
  WithIdempotencyOptions,
} from './trpc/options.js';
export { steps } from './trpc/steps.js';
