import { createEngine } from './core/engine.js';
import type { IdempotencyEngine, IdempotencyEngineOptions } from './core/types.js';
import { memoryStore } from './stores/memory/store.js';

/**
 * Creates the framework-agnostic engine. The tRPC adapter is built on it, and
 * it can protect any async operation, such as a queue consumer keyed by
 * message id or a webhook handler keyed by event id.
 *
 * Without a `store`, it keeps claims and outcomes in this process's memory
 * (`memoryStore()`): use a shared store as soon as more than one process
 * serves the same operations.
 */
export function createIdempotencyEngine(options: IdempotencyEngineOptions = {}): IdempotencyEngine {
  const store = options.store ?? memoryStore(options.now === undefined ? {} : { now: options.now });
  return createEngine({ ...options, store });
}
