import { AsyncLocalStorage } from 'node:async_hooks';

/** What a protected operation can reach from anywhere in its call. */
export interface IdempotentCall {
  /** Aborts when the claim is lost. */
  signal: AbortSignal;
  /** The store's transaction in transactional mode. */
  transaction: unknown;
}

// One instance per process, even if two copies of this package are loaded:
// the adapter of one copy and the store of another must see the same call.
const key = Symbol.for('trpc-idempotency.call');
const registry = globalThis as unknown as Record<symbol, AsyncLocalStorage<IdempotentCall> | undefined>;

/**
 * The protected call in progress. The tRPC adapter passes it down this way,
 * not through the context: `next({ ctx })` would copy the context into a
 * plain object, and a context built as a class instance would lose its methods.
 */
export const idempotentCall: AsyncLocalStorage<IdempotentCall> = (registry[key] ??= new AsyncLocalStorage<IdempotentCall>());
