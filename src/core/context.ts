import { AsyncLocalStorage } from 'node:async_hooks';
import type { Call, EngineScope } from './call.js';
import { IdempotencyError } from './errors.js';
import { signalGetter } from './signal-getter.js';
import { type IdempotencySteps, StepLog, stepKeyOf } from './steps.js';
import type { RecordedStep } from './store.js';

/** What a protected operation can reach from anywhere in its call. */
export interface IdempotentCall extends IdempotencySteps {
  /** Aborts when the claim is lost. */
  readonly signal: AbortSignal;
  /** The store's transaction in transactional mode. */
  readonly transaction: unknown;
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

type LeaseLike = { readonly signal: AbortSignal; wasLost(): boolean; fenced(): void };

const withSourceSignal = signalGetter((source: LeaseLike) => source.signal);

/**
 * The call of an operation that runs under a claim. Its signal is read through
 * from the lease, which makes one only for an operation that looks; its step
 * log is made only for an operation that uses steps (or finds some recorded).
 */
export class ClaimedCall implements IdempotentCall {
  // Fields declared and assigned in the constructor, not initialized as class fields: an initializer is
  // a property definition per instance, slower than an assignment, on a path every protected call takes.
  declare readonly signal: AbortSignal;
  declare readonly transaction: unknown;
  /** The step log, if the call used steps or found some recorded. */
  declare steps: StepLog | undefined;
  declare private readonly scope: EngineScope;
  declare private readonly call: Call;
  declare private readonly lease: LeaseLike;

  constructor(
    scope: EngineScope,
    call: Call,
    lease: LeaseLike,
    transaction: unknown,
    recorded: readonly RecordedStep[] | undefined,
  ) {
    this.scope = scope;
    this.call = call;
    this.lease = lease;
    this.transaction = transaction;
    this.steps = recorded === undefined ? undefined : new StepLog(scope, call, lease, recorded);
    withSourceSignal(this, lease);
  }

  // Getters that return bound functions: an operation destructures them (`async ({ step }) => ...`),
  // and only an operation that does pays for the closure.
  get step(): IdempotencySteps['step'] {
    return (name, fn) => this.#step(name, fn);
  }

  get stepKey(): IdempotencySteps['stepKey'] {
    return stepKeyOf(this.call.id);
  }

  #step<T>(name: string, fn: (step: { key: string }) => T | Promise<T>): Promise<T> {
    if (this.steps === undefined) {
      if (this.scope.store.raw.saveStep === undefined) {
        return Promise.reject(
          new IdempotencyError(
            'step_misuse',
            `step(${JSON.stringify(name)}): this store (${this.scope.store.raw.name ?? 'custom'}) cannot record steps. ` +
              'Use memoryStore(), redisStore() or drizzleStore(), or a store that implements saveStep.',
          ),
        );
      }
      this.steps = new StepLog(this.scope, this.call, this.lease, undefined);
    }
    return this.steps.step(name, fn);
  }
}
// The brand on the prototype: shared, rather than set on every call.
Object.defineProperty(ClaimedCall.prototype, claimedBrand, { value: true });

/** True for a {@link ClaimedCall}, not a call the engine runs unprotected. */
export function isClaimedCall(call: object): call is ClaimedCall {
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
