import { AsyncLocalStorage } from 'node:async_hooks';
import { signalGetter } from './signal-getter.js';

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
export const idempotentCall: AsyncLocalStorage<IdempotentCall> = (registry[key] ??=
  new AsyncLocalStorage<IdempotentCall>());

// A brand, shared by every copy of this package, rather than a WeakSet: a weak
// collection that every call enters slows down each young-generation GC.
const claimedBrand = Symbol.for('trpc-idempotency.claimed');

/**
 * The call of an operation that runs under a claim. Its signal is read through
 * from `source` (the lease), which makes one only for an operation that looks.
 */
export function claimedCall(source: { readonly signal: AbortSignal }, transaction: unknown): IdempotentCall {
  return withSourceSignal({ [claimedBrand]: true, transaction }, source);
}

const withSourceSignal = signalGetter((source: { readonly signal: AbortSignal }) => source.signal);

/** True for a call made by {@link claimedCall}, not one the engine runs unprotected. */
export function isClaimedCall(call: object): boolean {
  return (call as Record<symbol, unknown>)[claimedBrand] === true;
}

/**
 * Runs `fn` as the claimed call `call`. On Node 20, entering an
 * AsyncLocalStorage turns on a promise hook for the whole process, which every
 * promise then pays for (about 15% of a small tRPC server's throughput). So
 * `call` enters `idempotentCall` only where code deep in the operation must
 * reach it: a transaction (see `transactionOf`), or a call nested in another
 * one (so it never sees the outer call's transaction). Otherwise the tRPC
 * adapter hands the resolver its signal directly (see `isClaimedCall`).
 */
export function runAsCall<T>(call: IdempotentCall, fn: () => T): T {
  if (call.transaction === undefined && idempotentCall.getStore() === undefined) return fn();
  return idempotentCall.run(call, fn);
}
