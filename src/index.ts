// trpc-idempotency: safe retries for tRPC mutations. This entry is what a tRPC
// server needs; the engine without tRPC, and what store authors need, is in
// trpc-idempotency/core, the client half in trpc-idempotency/client.

export type { IdempotencyEvent, IdempotencyEventHandler, IdempotencyEventResult } from './core/events.js';
export type { IdempotencyErrorReason } from './core/idempotency-error.js';
export { IdempotencyConfigError, IdempotencyError, retryable } from './core/idempotency-error.js';
export type { IdempotencyPolicyOptions, InFlightPolicy, StoreErrorPolicy } from './core/policy.js';
export type { IdempotencyStore } from './core/store.js';
export type { IdempotencyEngine, IdempotencyEngineOptions, IdempotencySteps } from './core/types.js';
export { createIdempotencyEngine } from './default-engine.js';
export type { MemoryStore, MemoryStoreOptions } from './stores/memory/store.js';
export { memoryStore } from './stores/memory/store.js';
export { withIdempotency } from './trpc/builder.js';
export { type IdempotencyErrorData, idempotencyErrorData, idempotencyErrorFormatter } from './trpc/error-shape.js';
export type {
  DataTransformerOption,
  IdempotencyMeta,
  IdempotencyProcedureOptions,
  WithIdempotencyOptions,
} from './trpc/options.js';
export { steps } from './trpc/steps.js';
